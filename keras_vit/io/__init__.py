"""Files in and out: checked output paths, atomic writes and strict JSON
(`files`); checkpoints fetched by URL into a cache (`download`)."""
