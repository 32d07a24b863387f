"""The workflows under .github/: the three offline linters and our own rules, each shown to catch a planted fault."""
