package driver

import (
	"sync"
	"sync/atomic"
)

// Parallel runs f(0) … f(count-1) with at most width calls in flight and
// returns the first error (no call starts after it).
func Parallel(count, width int, f func(i int) error) error {
	var wg sync.WaitGroup
	var first atomic.Value
	next := atomic.Int64{}
	for w := 0; w < width && w < count; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= count || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}
