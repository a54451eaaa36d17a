"""The MCU-row index: building one and its counts (_jpeg_index), the process's cache (_cache),
sidecar files (_sidecar), and counts as a value a loader adds up (_counts).
custom_op/__init__.py exports the public names."""
