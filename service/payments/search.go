package payments

import (
	"fmt"
	"time"

	"github.com/atomicrides/atomicrides/service"
)

// Metadata keys of the tag the adapter writes on every object and reads
// back (service.Tag).
const (
	metadataNamespace = "ar_ns"
	metadataRider     = "ar_rider"
	metadataKey       = "ar_key"
)

// tagMetadata writes t as metadata of a request.
func tagMetadata(add func(key, value string), t service.Tag) {
	add(metadataNamespace, t.Namespace)
	add(metadataRider, t.Rider)
	add(metadataKey, t.Key)
}

// tagOf reads the tag of an object's metadata; an object made by someone
// else has an empty one.
func tagOf(md map[string]string) service.Tag {
	return service.Tag{Namespace: md[metadataNamespace], Rider: md[metadataRider], Key: md[metadataKey]}
}

// keyQuery is the Stripe search query matching objects made under the
// processor key key: metadata['ar_key']:'<key>'. Keys are hex digests with
// a prefix and never contain quotes, so no escaping is needed.
func keyQuery(key string) string {
	return fmt.Sprintf("metadata['%s']:'%s'", metadataKey, key)
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
