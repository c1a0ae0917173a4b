"""Security as pure logic, below the broker and the clients: TLS contexts, principals, SASL
mechanisms (PLAIN, SCRAM, OAUTHBEARER), the ACL authorizer and client quotas.

Nothing here opens a socket or reads the metadata store: the server (and Samsa's clients)
wire these pieces to their connections and their stored ACLs, credentials and quotas.
"""
