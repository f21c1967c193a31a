//go:build !failpoints

package failpoint

// Enabled reports whether failpoints are compiled in (build tag
// "failpoints"). Guard every call with it so that the compiler drops the
// call and the making of its name.
const Enabled = false

// Hit does nothing in a build without the "failpoints" tag.
func Hit(string) {}
