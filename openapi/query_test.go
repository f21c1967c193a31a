package openapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/stretchr/testify/require"
)

// strictQuery works for any operation from the parameters it declares: an
// exploded array may be repeated, a deepObject takes its name[key]s, and
// anything else is named in one 422.
func TestStrictQueryAnyOperation(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	h := &handlers{api: humago.New(mux, huma.DefaultConfig("test", "1"))}
	type input struct {
		N      int               `query:"n"`
		Tags   []string          `query:"tag,explode"`
		Colors []string          `query:"colors"`
		Filter map[string]string `query:"filter,deepObject"`
		Name   string            `path:"name"`
	}
	huma.Register(h.api, huma.Operation{
		OperationID: "probe", Method: http.MethodGet, Path: "/probe/{name}",
		Middlewares: huma.Middlewares{h.strictQuery},
	}, func(context.Context, *input) (*struct{}, error) { return &struct{}{}, nil })

	for _, c := range []struct {
		query string
		want  []string // the locations named; nil: accepted
	}{
		{"", nil},
		{"n=1&tag=a&tag=b&tag=c&colors=red,blue&filter[x]=1&filter[y]=2", nil},
		{"n=1&n=2", []string{"query.n"}},
		{"colors=red&colors=blue", []string{"query.colors"}},
		{"filter[x]=1&filter[x]=2", []string{"query.filter[x]"}},
		{"name=x&filter=1&N=1&tags=a", []string{"query.name", "query.filter", "query.N", "query.tags"}},
		{"n=%zz&tag=a;b", []string{"query.n", "query.tag"}},
		{"%zz=1", []string{"query.%zz"}},
		{"n=1&&&n=2", []string{"query.n"}},
		{"n=", []string{"query.n"}},
		{"tag=a&tag=&filter[x]=&colors", []string{"query.tag", "query.filter[x]", "query.colors"}},
	} {
		t.Run(c.query, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/probe/x?"+c.query, nil))
			if c.want == nil {
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
				return
			}
			require.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
			var body huma.ErrorModel
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			var locs []string
			for _, e := range body.Errors {
				locs = append(locs, e.Location)
			}
			require.Equal(t, c.want, locs)
		})
	}
}
