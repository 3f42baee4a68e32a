"""Who may talk to the broker: users with access keys, and the signature the official clients send
(docs/security.md, "Authentication")."""
