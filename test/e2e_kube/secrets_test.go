package e2ekube

import (
	"context"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// noControllerSecrets fails t if node n's agent still stores a secret of the controller's
// naming (k8s<hash>_NAME): once nothing placed there names one, it is removed.
func (e *env) noControllerSecrets(t *testing.T, name string, n *node) {
	t.Helper()
	secs, err := zygo.NewTCPClient(n.addr, n.token).ListSecrets(context.Background())
	if err != nil {
		t.Fatalf("listing node %s's secrets: %v", name, err)
	}
	for _, s := range secs {
		if strings.HasPrefix(s.Name, "k8s") {
			t.Errorf("node %s still stores secret %s after the last object naming it went", name, s.Name)
		}
	}
}
