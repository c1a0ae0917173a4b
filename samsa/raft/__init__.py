"""KRaft (KIP-595, KIP-996): the consensus of the metadata quorum, sans-I/O.

``consensus`` is the state machine (one transition table), ``messages`` the plain data it takes
and gives, ``quorum_state`` the quorum-state file's content. Nothing here opens a file or a socket
or reads a clock: the controller's I/O layer drives it.
"""
