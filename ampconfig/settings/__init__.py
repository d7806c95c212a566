"""What the user says: precision modes, session config, mixlist, keep_dtype, validation, schemas."""
