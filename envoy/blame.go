package envoy

// The pool's upstream filter: Envoy's half of the blame table
// (keypool.Rules), rendered from it so that the two never differ.

import (
	"fmt"
	"strings"

	"github.com/modelgateway/gateway/internal/keypool"
)

// blameLua is the Lua upstream filter of an aggregate whose request may try
// at most keys keys. On each attempt's reply of a status the table judges it
// names the body's vendor error (keypool.ErrorHeader, for the sidecar's
// log) and, when the table blames the key and the request has tried fewer
// than keys keys, marks the reply retriable (keypool.RetryHeader, the retry
// policy's retriable_headers). The aggregate tries its key first, then the
// others in order, so attempt n is on the n-th key: a reply is never
// retried on the key that gave it.
func blameLua(keys int) string {
	var b strings.Builder
	b.WriteString("-- Rendered from keypool.Rules (envoy/blame.go).\n")
	b.WriteString("local markers = {\n")
	for _, m := range keypool.Markers {
		fmt.Fprintf(&b, "  {%s, %s},\n", luaString(m.Name), luaString(luaPattern(m)))
	}
	b.WriteString("}\nlocal remaining = {")
	for i, h := range keypool.RemainingHeaders {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(luaString(h))
	}
	b.WriteString("}\n-- status, error, retry-after wanted, spent wanted, the key's fault\nlocal rules = {\n")
	for _, r := range keypool.Rules {
		fmt.Fprintf(&b, "  {%d, %s, %t, %t, %t},\n", r.Status, luaString(r.Error), r.RetryAfter, r.Spent, r.Blame == keypool.BlameKey)
	}
	b.WriteString("}\nlocal judged = {")
	for i, s := range keypool.Statuses() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%d] = true", s)
	}
	fmt.Fprintf(&b, "}\nlocal keys = %d\n", keys)
	b.WriteString(`
-- An absent header is no value at all (not nil): tonumber would fail.
function envoy_on_request(h)
  local raw = h:headers():get("x-envoy-attempt-count")
  local n = (raw and tonumber(raw)) or 1
  h:headers():remove("x-envoy-attempt-count")
  h:streamInfo():dynamicMetadata():set("gateway.blame", "attempt", n)
end

function envoy_on_response(h)
  local status = tonumber(h:headers():get(":status"))
  if not judged[status] then
    return
  end
  local err = ""
  -- A refusal's body is small; waiting for it ends the headers object
  -- taken before, so they are taken again after.
  local body = h:body()
  if body ~= nil then
    local s = body:getBytes(0, math.min(body:length(), 65536))
    for _, m in ipairs(markers) do
      if string.find(s, m[2]) then
        err = m[1]
        break
      end
    end
  end
  local hs = h:headers()
  hs:remove("` + keypool.ErrorHeader + `")
  hs:remove("` + keypool.RetryHeader + `")
  if err ~= "" then
    hs:add("` + keypool.ErrorHeader + `", err)
  end
  local spent = false
  for _, name in ipairs(remaining) do
    local raw = hs:get(name)
    local v = raw and tonumber(raw)
    if v and v <= 0 then
      spent = true
    end
  end
  local md = h:streamInfo():dynamicMetadata():get("gateway.blame")
  local attempt = (md and md["attempt"]) or 1
  for _, r in ipairs(rules) do
    if r[1] == status and (r[2] == "" or r[2] == err) and (not r[3] or hs:get("retry-after") ~= nil) and (not r[4] or spent) then
      if r[5] and attempt < keys then
        hs:add("` + keypool.RetryHeader + `", "key")
      end
      return
    end
  end
end
`)
	return b.String()
}

// headroomLua is the listener's Lua filter of a configuration with a pool:
// on every reply it puts the reply's headroom (the lowest remaining
// fraction of the vendor's rate-limit headers, keypool.CapacityHeaders) in
// the request's dynamic metadata, which the ext_proc filter forwards to
// the sidecar with the reply's first body chunk: the pool hears how much
// the served key has left on every reply, not only on refusals.
func headroomLua() string {
	var b strings.Builder
	b.WriteString("-- Rendered from keypool.CapacityHeaders (envoy/blame.go).\nlocal limits = {\n")
	for _, h := range keypool.CapacityHeaders {
		fmt.Fprintf(&b, "  {%s, %s},\n", luaString(h[0]), luaString(h[1]))
	}
	b.WriteString(`}

function envoy_on_response(h)
  local hs = h:headers()
  local low = 2
  for _, l in ipairs(limits) do
    local rem, lim = hs:get(l[1]), hs:get(l[2])
    local r, n = rem and tonumber(rem), lim and tonumber(lim)
    if r and n and n > 0 and r / n < low then
      low = r / n
    end
  end
  if low <= 1 then
    h:streamInfo():dynamicMetadata():set("` + keypool.HeadroomNamespace + `", "` + keypool.HeadroomField + `", low)
  end
end
`)
	return b.String()
}

// luaPattern is m's keypool.Marker.Pattern as a Lua pattern.
func luaPattern(m keypool.Marker) string {
	p := `"` + luaQuote(m.Field) + `"%s*:%s*"` + luaQuote(m.Value)
	if !m.Prefix {
		p += `"`
	}
	return p
}

// luaQuote escapes Lua's pattern magic characters.
func luaQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("^$()%.[]*+-?", r) {
			b.WriteByte('%')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// luaString is s as a Lua string literal.
func luaString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// indent prefixes each line of s with n spaces, for a YAML block scalar.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}
