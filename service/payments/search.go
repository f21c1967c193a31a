package payments

import (
	"fmt"
	"strconv"
)

// Metadata keys the adapter writes and searches by.
const (
	metadataUserID = "user_id"
	metadataRideID = "ride_id"
)

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// metadataQuery is the Stripe search query matching objects whose metadata
// key equals id, e.g. metadata['ride_id']:'42'. Keys and ids never contain
// quotes, so no escaping is needed.
func metadataQuery(key string, id int64) string {
	return fmt.Sprintf("metadata['%s']:'%d'", key, id)
}
