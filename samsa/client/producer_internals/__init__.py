"""The parts of Samsa's producer: the accumulator (caller's side), the sender (event loop), and
the core that joins them with the send pipeline, shared by Producer and AIOProducer."""
