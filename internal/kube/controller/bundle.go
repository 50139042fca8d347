package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// fetchTimeout bounds the download of a Function's URL source.
const fetchTimeout = 60 * time.Second

// nodeFunctionName is a Function's name on the node agents: "NAMESPACE-NAME" cut to 37
// characters, then "-" and the first 128 bits of the sha256 of "NAMESPACE/NAME" in base 36
// (25 characters of [0-9a-z]), which fits the agents' pattern (^[a-z0-9][a-z0-9-]{0,62}$).
// The hash is what keeps two namespaces apart ("team" + "prod-x" and "team-prod" + "x" share
// the readable part): 128 bits make a collision infeasible to search for, where the first
// form's 32 bits (legacyNodeFunctionName) were not.
func nodeFunctionName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	h := new(big.Int).SetBytes(sum[:16]).Text(36)
	h = strings.Repeat("0", 25-len(h)) + h
	base := strings.ReplaceAll(namespace+"-"+name, ".", "-")
	if len(base) > 37 {
		base = strings.TrimRight(base[:37], "-")
	}
	return base + "-" + h
}

// legacyNodeFunctionName is nodeFunctionName's first form (54 characters and 8 hex digits of
// the sha256): a controller upgraded from it removes a Function under that name too once it
// deploys it under the new one, or removes it.
func legacyNodeFunctionName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	base := strings.ReplaceAll(namespace+"-"+name, ".", "-")
	if len(base) > 54 {
		base = strings.TrimRight(base[:54], "-")
	}
	return base + "-" + hex.EncodeToString(sum[:4])
}

// errSource is wrapped by sourceFiles' error when the source itself is at fault (missing,
// unreachable, a digest mismatch): a condition, not a retry storm.
var errSource = errors.New("function source")

// errUnsupported is wrapped when the source is of a kind not implemented (none today).
var errUnsupported = errors.New("not implemented")

// sourceFiles returns the function's files, by path, from its source.
func sourceFiles(ctx context.Context, c client.Reader, hc *http.Client, fn *zygov1.Function) (map[string][]byte, error) {
	src := fn.Spec.Source
	switch {
	case src.ConfigMap != nil:
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: src.ConfigMap.Name}, &cm); err != nil {
			return nil, fmt.Errorf("%w: spec.source.configMap.name: ConfigMap %s/%s: %w", errSource, fn.Namespace, src.ConfigMap.Name, err)
		}
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			files[k] = v
		}
		return files, nil
	case src.URL != nil:
		return fetchArchive(ctx, hc, src.URL.URL, src.URL.SHA256)
	case src.OCI != nil:
		files, digest, err := fetchOCI(ctx, c, hc, fn) // oci.go
		if err == nil {
			log.FromContext(ctx).V(1).Info("pulled the function's OCI source", "reference", src.OCI.Reference, "digest", digest)
		}
		return files, err
	}
	return nil, fmt.Errorf("%w: spec.source: none of configMap, url, oci is set", errSource)
}

// fetchArchive downloads a gzip'd tar (at most wire.MaxBundleBytes), checks its sha256 and
// returns its regular files by path. Its errors carry the status line, never the body.
func fetchArchive(ctx context.Context, hc *http.Client, url, want string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: spec.source.url: %w", errSource, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: spec.source.url: fetching %s: %s", errSource, url, sourceErrText(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: spec.source.url: fetching %s: it answered %d %s", errSource, url, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: spec.source.url: reading %s: %s", errSource, url, sourceErrText(err))
	}
	if len(b) > wire.MaxBundleBytes {
		return nil, fmt.Errorf("%w: spec.source.url: %s is larger than %d bytes", errSource, url, wire.MaxBundleBytes)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fmt.Errorf("%w: spec.source.url.sha256: %s has sha256 %s, not %s", errSource, url, got, want)
	}
	return untar(b)
}

// Limits of a URL or OCI source once unpacked: the daemon's own bounds on a deployed bundle
// (internal/function MaxUnpackedBytes and MaxBundleFiles, not imported: that package pulls in
// the whole sandbox runtime), so the controller never holds more than an agent would accept.
const (
	maxUnpackedBytes = 256 << 20 // sum of the regular files' sizes, bytes
	maxArchiveFiles  = 10_000    // tar entries of any type
)

// untar returns the regular files of a gzip'd tar (a URL source), by cleaned relative path;
// see unpackTar.
func untar(b []byte) (map[string][]byte, error) { return unpackTar("spec.source.url", b, true) }

// unpack is untar for an OCI layer, whose tar may be gzip'd or not.
func unpack(field string, b []byte) (map[string][]byte, error) { return unpackTar(field, b, false) }

// unpackTar returns the regular files of a tar (gzip'd when needGzip, or when it starts as
// gzip does), by cleaned relative path; a path leaving the archive is an error naming field.
// It reads the stream entry by entry and refuses, before reading its data, an entry whose
// declared size would take the files past maxUnpackedBytes, and an archive of more than
// maxArchiveFiles entries: a small archive never expands in memory.
func unpackTar(field string, b []byte, needGzip bool) (map[string][]byte, error) {
	var r io.Reader = bytes.NewReader(b)
	if needGzip || bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: not a gzip'd tar: %w", errSource, field, err)
		}
		r = gz
	}
	tr := tar.NewReader(r)
	files := map[string][]byte{}
	var total int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: reading the tar: %w", errSource, field, err)
		}
		if entries >= maxArchiveFiles {
			return nil, fmt.Errorf("%w: %s: the archive has more than %d entries", errSource, field, maxArchiveFiles)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if p == "." || strings.HasPrefix(p, "../") || path.IsAbs(p) {
			return nil, fmt.Errorf("%w: %s: entry %q leaves the archive", errSource, field, h.Name)
		}
		if h.Size < 0 || h.Size > maxUnpackedBytes-total {
			return nil, fmt.Errorf("%w: %s: the archive unpacks to more than %d MiB (at entry %q, %d bytes)",
				errSource, field, maxUnpackedBytes>>20, h.Name, h.Size)
		}
		data, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: reading %s: %w", errSource, field, h.Name, err)
		}
		total += int64(len(data))
		files[p] = data
	}
}

// manifest is the zygo.toml the controller writes for a Function.
type manifest struct {
	Name    string            `toml:"name"`
	Runtime string            `toml:"runtime"`
	Handler string            `toml:"handler"`
	Secrets []string          `toml:"secrets,omitempty"`
	Env     map[string]string `toml:"env,omitempty"`
	Limits  manifestLimits    `toml:"limits,omitempty"`
}

type manifestLimits struct {
	TimeoutMs int32 `toml:"timeout_ms,omitempty"`
	MemoryMiB int32 `toml:"memory_mib,omitempty"`
	CPUMs     int32 `toml:"cpu_ms,omitempty"`
}

// bundle returns the gzip'd tar the agents deploy: files plus a zygo.toml written from the
// spec (one in files is replaced), with fixed times and sorted names so that the same input
// gives the same bytes.
func bundle(fn *zygov1.Function, files map[string][]byte) ([]byte, error) {
	m := manifest{Name: nodeFunctionName(fn.Namespace, fn.Name), Runtime: fn.Spec.Runtime, Handler: fn.Spec.Handler,
		Limits: manifestLimits{TimeoutMs: fn.Spec.Limits.TimeoutMs, MemoryMiB: fn.Spec.Limits.MemoryMiB, CPUMs: fn.Spec.Limits.CPUMs}}
	if len(fn.Spec.Env) > 0 {
		m.Env = map[string]string{}
	}
	for _, e := range fn.Spec.Env {
		m.Env[e.Name] = e.Value
	}
	for _, s := range fn.Spec.Secrets { // the daemon writes each as /run/secrets/NAME per request
		m.Secrets = append(m.Secrets, NodeSecretName(fn.Namespace, s))
	}
	var mb bytes.Buffer
	if err := toml.NewEncoder(&mb).Encode(m); err != nil {
		return nil, fmt.Errorf("writing zygo.toml: %w", err)
	}
	all := map[string][]byte{}
	for k, v := range files {
		all[k] = v
	}
	all["zygo.toml"] = mb.Bytes()
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	slices.Sort(names)
	var out bytes.Buffer
	gz := gzip.NewWriter(&out)
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	slices.Sort(dirNames) // a parent sorts before its children
	for _, d := range dirNames {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(all[n])), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(all[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	if out.Len() > wire.MaxBundleBytes {
		return nil, fmt.Errorf("%w: the function's files take %d bytes packed, more than %d", errSource, out.Len(), wire.MaxBundleBytes)
	}
	return out.Bytes(), nil
}

// fetchHeaderTimeout bounds connecting to a Function's URL source and waiting for its
// response headers; fetchTimeout bounds the whole download.
const fetchHeaderTimeout = 10 * time.Second

// defaultFetchClient fetches URL and OCI sources when FunctionReconciler.HTTP is nil: the
// zero SourcePolicy (sourcepolicy.go).
var defaultFetchClient = newFetchClient(fetchHeaderTimeout, nil)
