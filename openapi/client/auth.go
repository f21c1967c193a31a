package client

import (
	"context"
	"net/http"
)

// WithBearer authenticates every request with token: a rider's API key,
// the operator token for the admin operations, or the dispatch side's token
// (DISPATCH_TOKEN) to complete and cancel trips.
func WithBearer(token string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}
