package cli

func init() {
	// Kept out of noOutputFlag's literal so that its alignment does not change.
	noOutputFlag["zygo sandbox checkpoints export"] = "writes the image's tar to stdout"
}
