// Package image builds the integration tests' OCI image: a tiny rootfs holding Debian's static
// busybox and its applet links, written as an OCI image layout archive that `ctr images import`
// and `nerdctl load` accept.
//
// No registry is reachable from the test machines, so the image is made here from host files.
// The output is byte-for-byte deterministic for a given busybox binary (fixed mtimes, owners and
// order), so it can be cached. This package must never fetch anything or depend on a daemon.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Name is the reference the image is imported as.
const Name = "docker.io/endo/busybox:test"

// DefaultBusybox is where Debian's busybox-static package puts its binary.
const DefaultBusybox = "/bin/busybox"

// epoch is the mtime of every entry and the image's creation time: a fixed value keeps the
// digests stable from build to build.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Options choose the image's inputs.
type Options struct {
	// Busybox is the static busybox binary copied to /bin/busybox (DefaultBusybox if empty).
	Busybox string
	// Name is the image reference (Name if empty).
	Name string
}

// Write builds the image and writes it to w as an OCI layout tar archive.
func Write(w io.Writer, opts Options) error {
	if opts.Busybox == "" {
		opts.Busybox = DefaultBusybox
	}
	if opts.Name == "" {
		opts.Name = Name
	}
	bb, err := os.ReadFile(opts.Busybox)
	if err != nil {
		return fmt.Errorf("read busybox (install busybox-static): %w", err)
	}
	applets, err := appletNames(opts.Busybox)
	if err != nil {
		return err
	}
	layerTar, err := rootfs(bb, applets)
	if err != nil {
		return fmt.Errorf("build rootfs layer: %w", err)
	}
	layerGz, err := gzipBytes(layerTar)
	if err != nil {
		return fmt.Errorf("compress rootfs layer: %w", err)
	}

	created := epoch
	config := ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: "amd64", OS: "linux"},
		Config: ocispec.ImageConfig{
			Env:        []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin"},
			Cmd:        []string{"/bin/sh"},
			WorkingDir: "/",
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(layerTar)}},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("encode image config: %w", err)
	}
	manifest := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    descriptor(ocispec.MediaTypeImageConfig, configJSON),
		Layers:    []ocispec.Descriptor{descriptor(ocispec.MediaTypeImageLayerGzip, layerGz)},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	mdesc := descriptor(ocispec.MediaTypeImageManifest, manifestJSON)
	mdesc.Platform = &ocispec.Platform{Architecture: "amd64", OS: "linux"}
	// ctr names an imported image after io.containerd.image.name; other tools read the OCI
	// ref.name annotation. Both carry the full reference.
	mdesc.Annotations = map[string]string{
		ocispec.AnnotationRefName:  opts.Name,
		"io.containerd.image.name": opts.Name,
	}
	index := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{mdesc},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	layoutJSON, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("encode oci-layout: %w", err)
	}

	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layoutJSON},
		{ocispec.ImageIndexFile, indexJSON},
	}
	for _, d := range [][]byte{configJSON, manifestJSON, layerGz} {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + digest.FromBytes(d).Encoded(), d})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(dirHeader(dir, 0o755)); err != nil {
			return fmt.Errorf("write archive dir %s: %w", dir, err)
		}
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, 0o644, f.data); err != nil {
			return fmt.Errorf("write archive file %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish image archive: %w", err)
	}
	return nil
}

// WriteFile builds the image into the file at path, replacing it atomically.
func WriteFile(path string, opts Options) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if err := Write(f, opts); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// appletNames asks busybox which applets it has, sorted, without busybox itself.
func appletNames(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var names []string
	for _, n := range strings.Fields(string(out)) {
		// Applet names become file names in /bin: reject anything that is not one path element.
		if n == "busybox" || n == "." || n == ".." || strings.Contains(n, "/") {
			continue
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s --list printed no applets", busybox)
	}
	sort.Strings(names)
	return names, nil
}

// rootfs returns the uncompressed layer tar.
func rootfs(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []struct {
		name string
		mode int64
	}{
		{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"proc/", 0o555}, {"root/", 0o700},
		{"run/", 0o755}, {"sys/", 0o555}, {"tmp/", 0o1777}, {"usr/", 0o755}, {"usr/bin/", 0o755},
		{"var/", 0o755},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(dirHeader(d.name, d.mode)); err != nil {
			return nil, err
		}
	}
	if err := writeFile(tw, "bin/busybox", 0o755, busybox); err != nil {
		return nil, err
	}
	for _, a := range applets {
		h := &tar.Header{
			Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	etc := []struct{ name, data string }{
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/hostname", "endo\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
	}
	for _, f := range etc {
		if err := writeFile(tw, f.name, 0o644, []byte(f.data)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func dirHeader(name string, mode int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: epoch, Format: tar.FormatPAX}
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	h := &tar.Header{
		Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
		ModTime: epoch, Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// gzipBytes compresses with a header that carries no name or time, so output is stable.
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func descriptor(mediaType string, data []byte) ocispec.Descriptor {
	sum := sha256.Sum256(data)
	return ocispec.Descriptor{
		MediaType: mediaType,
		Digest:    digest.NewDigestFromBytes(digest.SHA256, sum[:]),
		Size:      int64(len(data)),
	}
}
