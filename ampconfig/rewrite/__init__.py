"""The only graph mutation: realise a plan with casts and converted constants."""
