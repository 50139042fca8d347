package cli

import (
	"bytes"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// TestRenameField: a daemon message starting with the field to is shown with the flag --to,
// whatever its code (an unknown version is a 404); others are left as they are.
func TestRenameField(t *testing.T) {
	for _, code := range []wire.Code{wire.CodeNotFound, wire.CodeBadRequest} {
		err := renameField(&zygo.Error{Status: 404, ErrorBody: wire.ErrorBody{Code: code, Message: `to: "ff" matches no version of function "f"`}}, "to", "--to")
		var ze *zygo.Error
		if !errors.As(err, &ze) || ze.Message != `--to: "ff" matches no version of function "f"` || ze.Code != code {
			t.Errorf("%s: %v", code, err)
		}
	}
	other := &zygo.Error{ErrorBody: wire.ErrorBody{Code: wire.CodeNotFound, Message: `function "f" not found`}}
	if err := renameField(other, "to", "--to"); err.Error() != `function "f" not found` {
		t.Errorf("a message without the field: %v", err)
	}
}

// TestDeployProgressLines: without a terminal each step is one line on stderr naming the
// function, the step and the version; nothing goes to stdout.
func TestDeployProgressLines(t *testing.T) {
	var out, errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	p := newDeployProgress(cmd, "hello")
	for _, s := range []string{wire.StepUploading, wire.StepUnpacking, wire.StepImporting, wire.StepWarmup, wire.StepReady} {
		v := "sha256:0123456789abcdef0123"
		if s == wire.StepUploading {
			v = ""
		}
		p.update(wire.DeployEvent{Step: s, Version: v})
	}
	p.stop()
	want := "hello: uploading\nhello: unpacking sha256:0123456789ab\nhello: importing sha256:0123456789ab\n" +
		"hello: imported; warm-up checks done, moving traffic to sha256:0123456789ab\nhello: ready: sha256:0123456789ab\n"
	if errOut.String() != want || out.Len() != 0 {
		t.Errorf("stderr:\n%s\nwant:\n%s\nstdout %q", errOut.String(), want, out.String())
	}
}
