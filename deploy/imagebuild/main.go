// Command imagebuild writes the Atomic Rides container image, FROM scratch,
// as a docker-archive tarball that `podman load` (or `docker load`) reads.
// deploy/image.sh (go tool task image) runs it; see docs/deploy.md.
//
//	go run ./deploy/imagebuild -bin PATH -certs PATH -tag localhost/atomicrides:dev -epoch SECONDS -o image.tar
//
// The image holds the static binary at /atomicrides and the CA bundle at
// /etc/ssl/certs/ca-certificates.crt, in two layers. It runs
// `/atomicrides serve` as user 65532:65532 with ADDR=:8080, exposes 8080 and
// checks its health with `/atomicrides healthcheck` (GET /readyz).
//
// It is reproducible: every timestamp (the image's, its history's, its
// files') is -epoch, files are owned by 0:0 with fixed modes, and nothing
// of the machine (host name, build container) enters the configuration; the
// same inputs give the same image ID. The docker format, rather than OCI,
// because OCI images have no healthcheck.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's configuration.
const (
	binPath   = "atomicrides"
	certsPath = "etc/ssl/certs/ca-certificates.crt"
	// user is distroless's "nonroot": numeric, as scratch has no
	// /etc/passwd to look a name up in.
	user = "65532:65532"
	port = "8080"
)

// healthcheck is the image's HEALTHCHECK.
var healthcheck = &v1.HealthConfig{
	Test:        []string{"CMD", "/" + binPath, "healthcheck"},
	Interval:    10 * time.Second,
	Timeout:     5 * time.Second,
	StartPeriod: 30 * time.Second,
	Retries:     3,
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild: "+err.Error())
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	bin := fs.String("bin", "", "the static atomicrides binary (CGO_ENABLED=0)")
	certs := fs.String("certs", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle")
	tag := fs.String("tag", "localhost/atomicrides:dev", "the image's name, with its registry (localhost/ for a local image)")
	epoch := fs.Int64("epoch", 0, "every timestamp of the image, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	arch := fs.String("arch", runtime.GOARCH, "the binary's architecture (GOARCH)")
	out := fs.String("o", "", "the docker-archive tarball to write")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *bin == "" || *out == "" || fs.NArg() > 0 {
		return errors.New("usage: imagebuild -bin PATH -o PATH [-certs PATH] [-tag NAME:TAG] [-epoch SECONDS] [-arch GOARCH]")
	}
	ref, err := name.NewTag(*tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", *tag, err)
	}
	created := time.Unix(*epoch, 0).UTC()
	img, err := image(*bin, *certs, *arch, created)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return nil
}

// image is the image of the binary at bin and the CA bundle at certs, every
// timestamp of it created.
func image(bin, certs, arch string, created time.Time) (v1.Image, error) {
	certsLayer, err := fileLayer(certs, certsPath, 0o644, created)
	if err != nil {
		return nil, err
	}
	binLayer, err := fileLayer(bin, binPath, 0o755, created)
	if err != nil {
		return nil, err
	}
	at := v1.Time{Time: created}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: certsLayer, History: v1.History{Created: at, CreatedBy: "COPY ca-certificates.crt /" + certsPath}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: at, CreatedBy: "COPY atomicrides /" + binPath}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = at
	cf.Config = v1.Config{
		Entrypoint:   []string{"/" + binPath, "serve"},
		Env:          []string{"ADDR=:" + port},
		User:         user,
		ExposedPorts: map[string]struct{}{port + "/tcp": {}},
		Healthcheck:  healthcheck,
	}
	return mutate.ConfigFile(img, cf)
}

// fileLayer is a layer that holds the file at src as dst, with its parent
// directories (0755), every entry owned by 0:0 and modified at mtime.
func fileLayer(src, dst string, mode int64, mtime time.Time) (v1.Layer, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirs []string
	for d := path.Dir(dst); d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
}
