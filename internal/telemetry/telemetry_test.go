package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/atomicrides/atomicrides/internal/telemetry"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestSetupIsOffWithoutConfiguration(t *testing.T) {
	t.Parallel()
	for _, vars := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
	} {
		tr, err := telemetry.Setup(context.Background(), env(vars))
		require.NoError(t, err)
		require.False(t, tr.Enabled, "%v", vars)
		_, span := tr.Provider.Tracer("x").Start(context.Background(), "s")
		require.False(t, span.IsRecording())
		require.NoError(t, tr.Shutdown(context.Background()))
	}
}

func TestSetupRejectsUnsupportedValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	_, err := telemetry.Setup(context.Background(), env(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}))
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
	_, err = telemetry.Setup(context.Background(), env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
	}))
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL")
}

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps the names and
// service names of the spans it is sent.
type otlpReceiver struct {
	mu       sync.Mutex
	paths    []string
	spans    []string
	services []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.paths = append(o.paths, r.URL.Path)
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				o.services = append(o.services, kv.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				o.spans = append(o.spans, sp.Name)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)

	tr, err := telemetry.Setup(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	require.NoError(t, err)
	require.True(t, tr.Enabled)
	require.Contains(t, tr.Exporter, srv.URL+"/v1/traces")
	_, span := tr.Provider.Tracer("test").Start(context.Background(), "exported span")
	span.End()
	require.NoError(t, tr.Shutdown(context.Background())) // flushes the batch

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.Equal(t, []string{"exported span"}, recv.spans)
	require.Equal(t, []string{"/v1/traces"}, recv.paths)
	require.Contains(t, recv.services, telemetry.DefaultServiceName)
}

func TestLogHandlerAddsTraceAndSpanIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	logger.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "inside")
	logger.InfoContext(context.Background(), "outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var inside, outside map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &inside))
	require.NoError(t, json.Unmarshal(lines[1], &outside))
	require.Equal(t, sc.TraceID().String(), inside["trace_id"])
	require.Equal(t, sc.SpanID().String(), inside["span_id"])
	require.Equal(t, "test", inside["component"])
	require.NotContains(t, outside, "trace_id")
	require.NotContains(t, outside, "span_id")
}

func TestQueryName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: IdempotencyKeyInsert :one\nINSERT INTO idempotency_keys ...": "IdempotencyKeyInsert",
		"begin":                          "begin",
		"  SELECT 1":                     "select",
		"-- a comment\nUPDATE t SET x=1": "update",
		"":                               "query",
	} {
		require.Equal(t, want, telemetry.QueryName(sql), sql)
	}
}
