package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// encPool keeps JSON encoders with their buffers. The vendors do not escape
// <, > and & in their JSON, so neither does the fake.
var encPool = sync.Pool{New: func() any {
	e := &pooledEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

type pooledEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// appendJSON appends the JSON encoding of v to b, without a newline.
func appendJSON(b []byte, v any) []byte {
	e := encPool.Get().(*pooledEncoder)
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		// Only the fake's own types are encoded: this is a bug.
		panic(err)
	}
	b = append(b, bytes.TrimSuffix(e.buf.Bytes(), []byte{'\n'})...)
	if e.buf.Cap() <= 1<<20 {
		encPool.Put(e)
	}
	return b
}

// writeJSON answers with status and the JSON encoding of v.
func writeJSON(w http.ResponseWriter, status int, v any) {
	bp := getBuf()
	b := appendJSON((*bp)[:0], v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
	*bp = b
	putBuf(bp)
}
