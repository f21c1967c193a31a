package limits

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConcurrencyRefusesPastTheKeysLimit(t *testing.T) {
	t.Parallel()
	c := NewConcurrency()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Acquire("a", 10) {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 10, got, "ten of forty held at once")
	require.True(t, c.Acquire("b", 10), "another key has its own limit")
	require.False(t, c.Acquire("a", 10))
	c.Release("a")
	require.True(t, c.Acquire("a", 10), "a slot released is taken again")
	require.True(t, c.Acquire("a", 0), "zero limits nothing")
	for range 10 {
		c.Release("a")
	}
	c.Release("b")
	require.Zero(t, c.InFlight("a"))
	require.Empty(t, c.inFlight, "keys with nothing in flight take no memory")
}
