package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
)

// HoldStream reads an event-stream reply up to its first event, calls
// opened, and keeps the stream open until ctx ends; it closes the body. A
// reply other than 200 is an error "status N". The concurrency tests and the
// benchmark's open-streams phase hold thousands of streams this way.
func HoldStream(ctx context.Context, resp *http.Response, opened func()) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if bytes.HasPrefix(line, []byte("data:")) {
			break
		}
	}
	opened()
	<-ctx.Done()
	return nil
}
