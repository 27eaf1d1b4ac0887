package harness

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/endovisor/endo/integration/image"
)

// ImageName is the busybox test image's reference.
const ImageName = image.Name

var imageBuild struct {
	once sync.Once
	path string
	err  error
}

// ImportImage builds the busybox test image (once per test process, into <repo>/.cache/images)
// and imports it into this daemon. It returns the image reference.
func (c *Containerd) ImportImage(t testing.TB) string {
	t.Helper()
	imageBuild.once.Do(func() {
		dir := filepath.Join(c.paths.Repo, ".cache", "images")
		if imageBuild.err = os.MkdirAll(dir, 0o755); imageBuild.err != nil {
			return
		}
		imageBuild.path = filepath.Join(dir, "busybox-test.tar")
		imageBuild.err = image.WriteFile(imageBuild.path, image.Options{})
	})
	if imageBuild.err != nil {
		t.Fatalf("harness: build test image: %v", imageBuild.err)
	}
	if _, _, err := c.Ctr("images", "import", "--snapshotter", c.snapshotter, imageBuild.path); err != nil {
		t.Fatalf("harness: import test image: %v", err)
	}
	out, _, err := c.Ctr("images", "ls", "-q")
	if err != nil {
		t.Fatalf("harness: list images: %v", err)
	}
	for _, name := range strings.Fields(out) {
		if name == ImageName {
			return ImageName
		}
	}
	t.Fatalf("harness: image %s not listed after import; have: %q", ImageName, out)
	return ""
}
