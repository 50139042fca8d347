package controller

// OCI sources of a Function (spec.source.oci): the function's files are the one layer of an
// OCI artifact (an image manifest; docs/kubernetes.md, "OCI sources"), pulled with
// go-containerregistry under the same bounds as a URL source.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// ociLayerTypes are the media types a Function artifact's layer may have: a tar or a gzip'd
// tar of the function's directory.
var ociLayerTypes = map[string]bool{
	"application/vnd.oci.image.layer.v1.tar":            true,
	"application/vnd.oci.image.layer.v1.tar+gzip":       true,
	"application/vnd.docker.image.rootfs.diff.tar":      true,
	"application/vnd.docker.image.rootfs.diff.tar.gzip": true,
	"application/vnd.zygo.function.layer.v1.tar+gzip":   true,
	"application/vnd.zygo.function.layer.v1.tar":        true,
}

// fetchOCI pulls fn's OCI source: the reference (a tag, or a digest which the manifest must
// have), the credentials of spec.source.oci.pullSecretRef (a kubernetes.io/dockerconfigjson
// Secret of fn's namespace) when set, its one layer (at most wire.MaxBundleBytes, its digest
// checked), unpacked within the URL source's bounds. It returns the files by path and the
// manifest's digest. Every error wraps errSource and names the field; what the registry sent
// is in it only as its status line (sourceErrText). Every response is bounded before it is
// read (boundedTransport: a manifest at maxManifestBytes), the config at maxConfigBytes.
func fetchOCI(ctx context.Context, c client.Reader, hc *http.Client, fn *zygov1.Function) (map[string][]byte, string, error) {
	src := fn.Spec.Source.OCI
	ref, err := name.ParseReference(src.Reference, name.StrictValidation)
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %w", errSource, err)
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	tr := hc.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(boundedTransport{tr}),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 2})}
	if s := src.PullSecretRef; s != nil {
		auth, err := pullAuth(ctx, c, fn.Namespace, s.Name, ref.Context().RegistryStr())
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, remote.WithAuth(auth))
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: fetching the manifest of %s: %s", errSource, src.Reference, sourceErrText(err))
	}
	if desc.MediaType.IsIndex() {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s is an image index (%s): name one manifest of it by digest",
			errSource, src.Reference, desc.MediaType)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s: %s", errSource, src.Reference, sourceErrText(err))
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: reading the manifest of %s: %s", errSource, src.Reference, sourceErrText(err))
	}
	if len(m.Layers) != 1 {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s has %d layers: a Function's artifact has exactly one, a tar or gzip'd tar of its files",
			errSource, src.Reference, len(m.Layers))
	}
	l := m.Layers[0]
	if !ociLayerTypes[string(l.MediaType)] {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s's layer has media type %q: want a tar or gzip'd tar (%s)",
			errSource, src.Reference, l.MediaType, "application/vnd.oci.image.layer.v1.tar+gzip")
	}
	if l.Size < 0 || l.Size > wire.MaxBundleBytes {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s's layer is %d bytes: at most %d", errSource, src.Reference, l.Size, wire.MaxBundleBytes)
	}
	if m.Config.Size < 0 || m.Config.Size > maxConfigBytes {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s's config is %d bytes: at most %d", errSource, src.Reference, m.Config.Size, maxConfigBytes)
	}
	layer, err := img.LayerByDigest(l.Digest)
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: %s: %s", errSource, src.Reference, sourceErrText(err))
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: fetching the layer %s of %s: %s", errSource, l.Digest, src.Reference, sourceErrText(err))
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
	if err != nil {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: reading the layer %s of %s: %s", errSource, l.Digest, src.Reference, sourceErrText(err))
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != l.Size || l.Digest.Algorithm != "sha256" || hex.EncodeToString(sum[:]) != l.Digest.Hex {
		return nil, "", fmt.Errorf("%w: spec.source.oci.reference: the layer of %s is %d bytes with sha256:%x, not the manifest's %d bytes %s",
			errSource, src.Reference, len(b), sum, l.Size, l.Digest)
	}
	files, err := unpack("spec.source.oci.reference", b)
	if err != nil {
		return nil, "", err
	}
	return files, desc.Digest.String(), nil
}

// dockerConfig is the content of a kubernetes.io/dockerconfigjson Secret.
type dockerConfig struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// pullAuth returns the credentials for registry from the Secret secretName of namespace (type
// kubernetes.io/dockerconfigjson, key .dockerconfigjson, as an imagePullSecret): its "auths"
// entry whose key, without scheme and path, is the registry.
func pullAuth(ctx context.Context, c client.Reader, namespace, secretName, registry string) (authn.Authenticator, error) {
	field := "spec.source.oci.pullSecretRef.name"
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secretName}, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: Secret %s/%s: %w", errSource, field, namespace, secretName, err)
	}
	raw, ok := s.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return nil, fmt.Errorf("%w: %s: Secret %s/%s has no key %s (want a %s Secret)", errSource, field, namespace, secretName,
			corev1.DockerConfigJsonKey, corev1.SecretTypeDockerConfigJson)
	}
	var cfg dockerConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: Secret %s/%s: %s: %w", errSource, field, namespace, secretName, corev1.DockerConfigJsonKey, err)
	}
	for k, a := range cfg.Auths {
		host := strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
		host, _, _ = strings.Cut(host, "/")
		if host == registry {
			return authn.FromConfig(a), nil
		}
	}
	return nil, fmt.Errorf("%w: %s: Secret %s/%s has no credentials for registry %s", errSource, field, namespace, secretName, registry)
}
