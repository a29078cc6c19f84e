"""Custom pyinfra operations used by the roles.

May import: context, checks, fleet, facts, reads, images, connection, planning, profile (every layer
below it; never a role).
"""
