// Package deploy holds what a deployer runs: the container image's recipe
// (Containerfile, and image.sh, which `go tool task image` runs), the compose
// file that starts the image with PostgreSQL (compose.yaml) and the example
// of its environment (atomicrides.env.example).
//
// Its tests check them: the compose file's structure and its agreement with
// the example environment and the task's image tag, and the image itself,
// built through the task, inspected with podman, and run against the test
// PostgreSQL (in a container where podman can run one on the machine, else
// its binary, taken out of the image, with the image's configuration).
// docs/deploy.md documents them.
package deploy
