package wire

// Moving a checkpoint image between daemons: GET /v1/checkpoints/{id}/image answers the image
// as a tar (TarContentType) with its size (Content-Length) and SHA-256 (ImageSHA256Header)
// before the first byte; POST /v1/checkpoints/import?sha256=HEX takes such a tar and answers
// the new Checkpoint (201). docs/sandboxes.md describes the tar and what an import refuses.
const (
	// ImageSHA256Header is the SHA-256 of an exported image's tar stream, 64 hex digits.
	ImageSHA256Header = "X-Zygo-Image-Sha256"
	// ImageCheckpointHeader names the checkpoint an exported image is of ("cp-...").
	ImageCheckpointHeader = "X-Zygo-Checkpoint"
)
