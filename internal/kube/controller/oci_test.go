package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// tarOf returns a tar (gzip'd when gz) of files.
func tarOf(t *testing.T, gz bool, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	var w = &b
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for n, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return b.Bytes()
}

// pushArtifact pushes an image of layers (each with its media type) to ref on a registry
// reached with auth, and returns the manifest's digest.
func pushArtifact(t *testing.T, ref string, auth authn.Authenticator, layers ...v1.Layer) v1.Hash {
	t.Helper()
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// basicAuth wraps h: every request needs user:pass.
func basicAuth(h http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

const ociHandler = "def handler(event, ctx):\n    return {'from': 'oci'}\n"

func ociFunction(ref string, pull *zygov1.LocalRef) *zygov1.Function {
	return &zygov1.Function{ObjectMeta: objMeta("fn"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
		Source: zygov1.FunctionSource{OCI: &zygov1.OCISource{Reference: ref, PullSecretRef: pull}}}}
}

// deployedFiles returns the files of the bundle deployed for fn on any node.
func deployedFiles(t *testing.T, e *env) map[string][]byte {
	t.Helper()
	for _, a := range e.agents {
		for _, b := range a.functions {
			files, err := untar(b)
			if err != nil {
				t.Fatal(err)
			}
			return files
		}
	}
	return nil
}

func TestFunctionFromOCI(t *testing.T) {
	srv := httptest.NewServer(quietRegistry())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	gzLayer := static.NewLayer(tarOf(t, true, map[string]string{"main.py": ociHandler, "lib/util.py": "X = 1\n"}), types.OCILayer)
	dig := pushArtifact(t, host+"/fns/hello:v1", authn.Anonymous, gzLayer)
	plain := static.NewLayer(tarOf(t, false, map[string]string{"main.py": ociHandler}), types.OCIUncompressedLayer)
	pushArtifact(t, host+"/fns/plain:v1", authn.Anonymous, plain)
	two := static.NewLayer(tarOf(t, true, map[string]string{"b.py": ""}), types.OCILayer)
	pushArtifact(t, host+"/fns/two:v1", authn.Anonymous, gzLayer, two)
	cfgLayer := static.NewLayer([]byte(`{}`), "application/vnd.example.config+json")
	pushArtifact(t, host+"/fns/odd:v1", authn.Anonymous, cfgLayer)

	for _, ref := range []string{host + "/fns/hello:v1", host + "/fns/hello@" + dig.String(), host + "/fns/plain:v1"} {
		t.Run(ref, func(t *testing.T) {
			fn := ociFunction(ref, nil)
			e := newEnv(t, fn)
			e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
			e.get(fn)
			if c := condition(t, fn.Status.Conditions, zygov1.ConditionReady); c.Status != metav1.ConditionTrue {
				t.Fatalf("Ready = %+v", c)
			}
			if files := deployedFiles(t, e); string(files["main.py"]) != ociHandler {
				t.Fatalf("deployed files %v", files)
			}
		})
	}
	other := "sha256:" + strings.Repeat("0", 64)
	for ref, says := range map[string]string{
		host + "/fns/hello@" + other: "spec.source.oci.reference",
		host + "/fns/nope:v1":        "spec.source.oci.reference",
		host + "/fns/two:v1":         "2 layers",
		host + "/fns/odd:v1":         "media type",
		"Not A Reference":            "spec.source.oci.reference",
	} {
		t.Run("refused "+ref, func(t *testing.T) {
			fn := ociFunction(ref, nil)
			e := newEnv(t, fn)
			e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
			e.get(fn)
			c := condition(t, fn.Status.Conditions, zygov1.ConditionReady)
			if c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, says) {
				t.Fatalf("Ready = %+v, want SourceFailed saying %q", c, says)
			}
			if deployedFiles(t, e) != nil {
				t.Fatal("something was deployed")
			}
		})
	}
}

func TestFunctionFromOCITooLarge(t *testing.T) {
	srv := httptest.NewServer(quietRegistry())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	// A tar whose one entry declares more than the unpacked bound: refused before it is read.
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: maxUnpackedBytes + 1})
	zw.Close() // cut: the header is enough
	pushArtifact(t, host+"/fns/big:v1", authn.Anonymous, static.NewLayer(b.Bytes(), types.OCILayer))
	fn := ociFunction(host+"/fns/big:v1", nil)
	e := newEnv(t, fn)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
	e.get(fn)
	if c := condition(t, fn.Status.Conditions, zygov1.ConditionReady); c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, "more than 256 MiB") {
		t.Fatalf("Ready = %+v", c)
	}
}

func TestFunctionFromOCIWithPullSecret(t *testing.T) {
	srv := httptest.NewServer(basicAuth(quietRegistry(), "robot", "s3cret"))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pushArtifact(t, host+"/private/hello:v1", &authn.Basic{Username: "robot", Password: "s3cret"},
		static.NewLayer(tarOf(t, true, map[string]string{"main.py": ociHandler}), types.OCILayer))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, "http://"+host, base64.StdEncoding.EncodeToString([]byte("robot:s3cret")))
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)}}

	anon := ociFunction(host+"/private/hello:v1", nil)
	e := newEnv(t, anon, pull)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, anon)
	e.get(anon)
	if c := condition(t, anon.Status.Conditions, zygov1.ConditionReady); c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, "401") {
		t.Fatalf("without credentials: Ready = %+v", c)
	}

	withSecret := ociFunction(host+"/private/hello:v1", &zygov1.LocalRef{Name: "regcred"})
	withSecret.Name = "fn2"
	e = newEnv(t, withSecret, pull)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, withSecret)
	e.get(withSecret)
	if c := condition(t, withSecret.Status.Conditions, zygov1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("with the pull secret: Ready = %+v", c)
	}

	missing := ociFunction(host+"/private/hello:v1", &zygov1.LocalRef{Name: "nope"})
	e = newEnv(t, missing)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, missing)
	e.get(missing)
	if c := condition(t, missing.Status.Conditions, zygov1.ConditionReady); !strings.Contains(c.Message, "spec.source.oci.pullSecretRef.name") {
		t.Fatalf("a missing pull secret: Ready = %+v", c)
	}
}

// quietRegistry is go-containerregistry's in-memory registry, without its request log.
func quietRegistry() http.Handler { return registry.New(registry.Logger(log.New(io.Discard, "", 0))) }

// tamper wraps h: the bytes of blob digest are answered with their last byte changed.
func tamper(h http.Handler, digest string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		b := rec.Body.Bytes()
		if len(b) > 0 {
			b[len(b)-1] ^= 0xff
		}
		w.WriteHeader(rec.Code)
		w.Write(b)
	})
}

func TestFunctionFromOCIAlteredLayer(t *testing.T) {
	reg := quietRegistry()
	layer := static.NewLayer(tarOf(t, true, map[string]string{"main.py": ociHandler}), types.OCILayer)
	ld, err := layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tamper(reg, ld.String()))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pushArtifact(t, host+"/fns/altered:v1", authn.Anonymous, layer)
	fn := ociFunction(host+"/fns/altered:v1", nil)
	e := newEnv(t, fn)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
	e.get(fn)
	if c := condition(t, fn.Status.Conditions, zygov1.ConditionReady); c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, "sha256") {
		t.Fatalf("Ready = %+v, want SourceFailed naming the digest", c)
	}
	if deployedFiles(t, e) != nil {
		t.Fatal("an altered layer was deployed")
	}
}
