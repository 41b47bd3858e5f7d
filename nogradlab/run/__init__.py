"""run: the whole collection executed and reported. The runner (``python -m nogradlab run``), the
report, the output folder's rules, the claims.json schema, and notebook 10's own-model document
(``yourmodel``). May import every other wing."""
