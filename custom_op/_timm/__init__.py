"""The timm and torchvision v1 integration: ComposeJPEG (_compose_jpeg), which runs a
Compose pipeline on an encoded JPEG and folds its crop and resize into one decode. The public
names are in custom_op.transforms."""
