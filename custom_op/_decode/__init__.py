"""The decode functions: one image (_single), a batch in one call (_batch), their argument
checks (_arguments), EXIF orientation (_orientation), prepared files (_prepared: prepare_jpeg,
seekable) and DecodeOptions (_options). custom_op/__init__.py exports the public names."""
