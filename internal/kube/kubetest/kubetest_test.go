package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var widgetGVK = schema.GroupVersionKind{Group: "kubetest.zygo.test", Version: "v1", Kind: "Widget"}

func widget(name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace("default")
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
	return u
}

// TestStartEnv starts the real API server, checks that it is the pinned kube-apiserver, that
// the CRD of testdata/crds is installed and its schema enforced, and that the kubeconfig file
// reaches the same server.
func TestStartEnv(t *testing.T) {
	env := StartEnv(t, "testdata/crds")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("asking the server's version: %v", err)
	}
	if want := pinnedKubernetes(t); info.GitVersion != want {
		t.Errorf("server version %q, want %q (tools/kube/go.mod)", info.GitVersion, want)
	}

	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("good", 3)); err != nil {
		t.Fatalf("creating a valid Widget: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(widgetGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "good"}, got); err != nil {
		t.Fatalf("reading the Widget back: %v", err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Errorf("spec.size read back %d, want 3", size)
	}
	err = c.Create(ctx, widget("too-big", 11))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size") {
		t.Errorf("creating a Widget of size 11 (maximum 10): got %v, want an Invalid error naming spec.size", err)
	}

	fromFile, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", env.Kubeconfig, err)
	}
	c2, err := client.New(fromFile, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(ctx, client.ObjectKey{Namespace: "default", Name: "good"}, got); err != nil {
		t.Errorf("reading the Widget through the kubeconfig file: %v", err)
	}
}

// TestAssetsDirFromEnv: KUBEBUILDER_ASSETS wins, and a directory without the binaries is an
// error that names the missing one.
func TestAssetsDirFromEnv(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("AssetsDir with an empty KUBEBUILDER_ASSETS: got %v, want an error naming kube-apiserver", err)
	}
}

// pinnedKubernetes returns the k8s.io/kubernetes version that tools/kube/go.mod requires.
func pinnedKubernetes(t *testing.T) string {
	t.Helper()
	script, err := findScript()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(script), "..", "tools", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "k8s.io/kubernetes" {
			return f[1]
		}
	}
	t.Fatal("tools/kube/go.mod does not require k8s.io/kubernetes")
	return ""
}
