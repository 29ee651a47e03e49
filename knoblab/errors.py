"""The one exception type a user sees as a single line (exit code 2)."""


class UserError(Exception):
    """Bad input or an environment problem the user can fix; the message says what and how."""
