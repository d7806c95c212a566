"""Reports for people (rich tables, HTML) and programs (JSON). Data in, text out."""
