package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionBody is what `zygo version -o json` prints.
type versionBody struct {
	Client clientVersion `json:"client"`
	// Daemon is the daemon's version from GET /v1/status; empty when none answered, which
	// DaemonError then says.
	Daemon      string `json:"daemon,omitempty"`
	DaemonError string `json:"daemon_error,omitempty"`
}

// clientVersion is this binary's build (runtime/debug.ReadBuildInfo).
type clientVersion struct {
	Version   string `json:"version"`            // the module's version; "(devel)" for a build from a checkout
	Revision  string `json:"revision,omitempty"` // the VCS commit, when built from a checkout
	Modified  bool   `json:"modified,omitempty"` // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// buildVersion returns this binary's version from its build info.
func buildVersion() clientVersion {
	v := clientVersion{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version = bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the daemon's (when one answers)",
		Long: "Print this zygo's version (from its build info: module version, VCS revision, Go version)\n" +
			"and the version of the daemon it talks to (GET /v1/status). A daemon that does not answer\n" +
			"is reported, not an error: the exit status is 0 either way.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := versionBody{Client: buildVersion()}
			if st, err := g.client().Status(cmd.Context()); err != nil {
				body.DaemonError = err.Error()
			} else {
				body.Daemon = st.Version
			}
			return out.print(cmd, body, func(w io.Writer) {
				c := body.Client
				rev := c.Revision
				if len(rev) > 12 {
					rev = rev[:12]
				}
				if c.Modified {
					rev += " (modified)"
				}
				fmt.Fprintf(w, "Client:\t%s\n  revision:\t%s\n  go:\t%s\n  platform:\t%s\n", c.Version, dash(rev), c.GoVersion, c.Platform)
				if body.DaemonError != "" {
					fmt.Fprintf(w, "Daemon:\t- (%s)\n", body.DaemonError)
				} else {
					fmt.Fprintf(w, "Daemon:\t%s\n", body.Daemon)
				}
			}, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}
