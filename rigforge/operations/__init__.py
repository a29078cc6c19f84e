"""Custom pyinfra operations used by the roles."""
