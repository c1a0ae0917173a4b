"""The connectors Samsa ships: file, PostgreSQL change capture, JDBC sink, MirrorMaker 2's."""
