package agents

import (
	"os"
	"testing"
)

// TestSDKReseedCoreIsTheAgents fails when the SDK's copy of reseedcore.py drifted from the
// one source (edit python/zygo_agent/reseedcore.py, then run `go generate ./agents`).
func TestSDKReseedCoreIsTheAgents(t *testing.T) {
	sdk, err := os.ReadFile("../sdk/python/zygo_sandbox/reseedcore.py")
	if err != nil {
		t.Fatal(err)
	}
	if string(sdk) != ReseedCorePy {
		t.Fatal("sdk/python/zygo_sandbox/reseedcore.py differs from agents/python/zygo_agent/reseedcore.py: run `go generate ./agents`")
	}
}
