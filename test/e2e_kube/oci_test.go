package e2ekube

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// testOCIFunction: a Function whose code is an OCI artifact (one gzip'd tar layer) pushed to
// a registry on loopback (go-containerregistry's registry, the real distribution protocol),
// named by digest, is pulled by the controller, deployed and answers through the route.
func (e *env) testOCIFunction(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	code := "def handler(event, context):\n    return {\"from\": \"oci\", \"name\": event.get(\"name\")}\n"
	if err := tw.WriteHeader(&tar.Header{Name: "main.py", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(code))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(code))
	tw.Close()
	zw.Close()
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), static.NewLayer(b.Bytes(), types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/functions/hello-oci:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing the artifact: %v", err)
	}
	dig, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	fn := &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello-oci"},
		Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
			Source: zygov1.FunctionSource{OCI: &zygov1.OCISource{Reference: host + "/functions/hello-oci@" + dig.String()}}}}
	e.mustCreate(t, fn)
	waitFor(t, 3*time.Minute, "Function hello-oci Ready", func() (bool, string) {
		if err := e.get(fn); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(fn.Status.Conditions, zygov1.ConditionReady), condStr(fn.Status.Conditions, zygov1.ConditionReady)
	})
	status, node, body := e.invokeAs(t, fn.Status.Route, e.invokerToken(t, "default"), `{"name":"registry"}`)
	if status != http.StatusOK || !strings.Contains(body, `"from": "oci"`) || !strings.Contains(body, `"name": "registry"`) || node == "" {
		t.Fatalf("invoke through the route: %d %s", status, body)
	}
	if err := e.c.Delete(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "Function hello-oci gone", func() (bool, string) {
		err := e.get(fn)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
