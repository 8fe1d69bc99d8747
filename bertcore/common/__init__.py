"""What every part of bertcore shares: the one-line user error (`errors`), outputs that appear
whole or not at all (`atomic`; the filesystem under them, `filesystems`) and stopping such
work at once on a signal (`interrupt`), folder locks (`lock`), fingerprints of params and
files (`digests`), dotted names (`dotted`), the hardware a model computes on (`cpu`,
`devices`) and MLflow behind one class (`tracking`)."""
