"""What ``gate init`` puts in a repository's CI: the files it writes and the paths a verdict watches."""
