"""Speed checks that print ratios; not part of the test run (see README.md here)."""
