package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// The JSON of E2B's control API (its OpenAPI document, spec/openapi.yml of e2b-dev/E2B, as the
// SDK's generated types have it), the parts Zygo serves.

// errorBody is E2B's Error.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// newSandbox is E2B's NewSandbox. Fields the SDK sends with their defaults (secure,
// allow_internet_access) are accepted; the ones Zygo cannot honour are refused when set
// (checkUnsupported).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout,omitempty"` // seconds; default 15
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AutoPause           *bool             `json:"autoPause,omitempty"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume          json.RawMessage   `json:"autoResume,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             json.RawMessage   `json:"network,omitempty"`
	Mcp                 json.RawMessage   `json:"mcp,omitempty"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts,omitempty"`
	IAM                 json.RawMessage   `json:"iam,omitempty"`
}

// sandboxBody is E2B's Sandbox: what create, connect, resume and each fork answer.
type sandboxBody struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// lifecycleBody is E2B's SandboxLifecycle.
type lifecycleBody struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// sandboxDetail is E2B's SandboxDetail; listed is ListedSandbox (the same without the
// tokens and lifecycle).
type sandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"` // "running" | "paused"
	Lifecycle       *lifecycleBody    `json:"lifecycle,omitempty"`
	VolumeMounts    []struct{}        `json:"volumeMounts"`
}

// timeoutBody is E2B's SandboxTimeoutRequest, ConnectSandbox, ResumedSandbox and
// SandboxRefreshRequest (duration).
type timeoutBody struct {
	Timeout   *int  `json:"timeout,omitempty"`
	AutoPause *bool `json:"autoPause,omitempty"` // resume's, deprecated
	// Memory (connect and resume from disk only when false) is accepted and ignored: a Zygo
	// pause always keeps memory.
	Memory *bool `json:"memory,omitempty"`
}

type refreshBody struct {
	Duration *int `json:"duration,omitempty"`
}

type pauseBody struct {
	Memory *bool `json:"memory,omitempty"`
}

type forkBody struct {
	Count   *int `json:"count,omitempty"`
	Timeout *int `json:"timeout,omitempty"`
}

// forkResult is E2B's SandboxForkResult: one per requested fork.
type forkResult struct {
	Sandbox *sandboxBody `json:"sandbox,omitempty"`
	Error   *errorBody   `json:"error,omitempty"`
}

type snapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// templateBody is the part of E2B's Template that Zygo has.
type templateBody struct {
	TemplateID  string    `json:"templateID"`
	BuildID     string    `json:"buildID"`
	Names       []string  `json:"names"`
	Aliases     []string  `json:"aliases"`
	Public      bool      `json:"public"`
	CPUCount    int       `json:"cpuCount"`
	MemoryMB    int       `json:"memoryMB"`
	DiskSizeMB  int       `json:"diskSizeMB"`
	EnvdVersion string    `json:"envdVersion"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	BuildStatus string    `json:"buildStatus"`
}

// maxBodyBytes bounds a control request's JSON.
const maxBodyBytes = 1 << 20

// decode reads r's JSON body into v (an empty body leaves v as it is), refusing unknown
// fields and trailing data; on failure it has answered 400 naming the problem.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "decoding request body: "+strings.TrimPrefix(err.Error(), "json: "))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "decoding request body: data after the JSON object")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers E2B's error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// seconds turns a timeout field in seconds into a duration, def when the field is absent;
// field names the field for errors. It refuses negative values, 0 (E2B has no "never") and
// more than sandbox.MaxTimeout, each error naming the value as sent.
func seconds(field string, v *int, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	maxSecs := int(sandbox.MaxTimeout / time.Second)
	switch {
	case *v < 0:
		return 0, fmt.Errorf("%s: %d: must not be negative", field, *v)
	case *v == 0:
		// E2B's timeout is a time to live (minimum 0): it has no "never", and 0 would end the
		// sandbox at once; Zygo refuses it rather than guess (a sandbox made to live forever
		// by mistake is a leak).
		return 0, fmt.Errorf("%s: 0: must be at least 1 second (a time to live; E2B has no \"no timeout\"): send the seconds the sandbox may live, at most %d", field, maxSecs)
	case *v > maxSecs:
		return 0, fmt.Errorf("%s: %d seconds: must be at most %d (%s)", field, *v, maxSecs, sandbox.MaxTimeout)
	}
	return time.Duration(*v) * time.Second, nil
}
