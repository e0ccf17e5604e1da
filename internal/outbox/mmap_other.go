//go:build !unix

package outbox

import "os"

func mapFile(*os.File, int) ([]byte, error) { return nil, ErrUnsupported }

func unmap([]byte) error { return nil }

func lockFile(*os.File) error { return nil }
