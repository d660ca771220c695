"""Built-in demo trainables for hpo."""
