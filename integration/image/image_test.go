package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
)

func readTar(t *testing.T, r io.Reader) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out[h.Name] = h
	}
}

func TestImageDeterministicAndComplete(t *testing.T) {
	if _, err := os.Stat(DefaultBusybox); err != nil {
		t.Skip("busybox-static not installed (integration/tools.sh installs it)")
	}
	var a, b bytes.Buffer
	require.NoError(t, Write(&a, Options{}))
	require.NoError(t, Write(&b, Options{}))
	require.Equal(t, a.Bytes(), b.Bytes(), "two builds must be byte-identical")

	// Walk the archive: index → manifest → config and layer.
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(a.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		blobs[h.Name] = data
	}
	require.Contains(t, blobs, ocispec.ImageLayoutFile)
	var index ocispec.Index
	require.NoError(t, json.Unmarshal(blobs[ocispec.ImageIndexFile], &index))
	require.Len(t, index.Manifests, 1)
	require.Equal(t, Name, index.Manifests[0].Annotations[ocispec.AnnotationRefName])

	var manifest ocispec.Manifest
	require.NoError(t, json.Unmarshal(blobs["blobs/sha256/"+index.Manifests[0].Digest.Encoded()], &manifest))
	require.Len(t, manifest.Layers, 1)
	layer := blobs["blobs/sha256/"+manifest.Layers[0].Digest.Encoded()]
	require.Equal(t, manifest.Layers[0].Size, int64(len(layer)))
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	require.NoError(t, err)
	files := readTar(t, zr)

	require.Equal(t, byte(tar.TypeReg), files["bin/busybox"].Typeflag)
	for _, applet := range []string{"sh", "echo", "cat", "ls", "wc", "uname", "true", "false", "tty", "stty", "sleep", "ps"} {
		h := files["bin/"+applet]
		require.NotNil(t, h, "applet %s", applet)
		require.Equal(t, "busybox", h.Linkname)
	}
	for _, name := range []string{"etc/passwd", "etc/group", "tmp/", "root/"} {
		require.Contains(t, files, name)
	}
	require.Equal(t, int64(0o1777), files["tmp/"].Mode)

	var config ocispec.Image
	require.NoError(t, json.Unmarshal(blobs["blobs/sha256/"+manifest.Config.Digest.Encoded()], &config))
	require.Equal(t, "amd64", config.Architecture)
	require.Len(t, config.RootFS.DiffIDs, 1)
}
