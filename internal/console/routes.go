package console

import (
	"net/http"

	"github.com/modelgateway/gateway/internal/roles"
)

// access is who may use a route: anyone (the sign-in pages, static files),
// or a signed-in person holding one of the roles.
type access struct {
	public bool
	roles  roles.Set
}

var (
	public         = access{public: true}
	anyOperator    = access{roles: roles.OperatorSide}
	operatorOnly   = access{roles: roles.Set{roles.Operator}}
	anyCustomer    = access{roles: roles.Customer}
	keyReaders     = access{roles: roles.Set{roles.Owner, roles.Admin, roles.Member, roles.Viewer}}
	keyMakers      = access{roles: roles.Set{roles.Owner, roles.Admin, roles.Member}}
	accountAdmins  = access{roles: roles.Set{roles.Owner, roles.Admin}}
	spendExporters = access{roles: roles.Set{roles.Owner, roles.Admin, roles.Billing}}
)

// operatorRoutes is every route of the operator console, by its mux
// pattern: the one table of who may do what. A route missing from it is
// refused to everyone (and TestEveryRouteHasAccess fails).
var operatorRoutes = map[string]access{
	"GET /static/":      public,
	"GET /signin":       public,
	"POST /signin":      public,
	"GET /sso/login":    public,
	"GET /sso/callback": public,
	"/":                 public, // the not-found page

	"POST /signout":      anyOperator,
	"GET /{$}":           anyOperator,
	"GET /models":        anyOperator,
	"GET /vendor-keys":   anyOperator,
	"GET /reconcile":     anyOperator,
	"GET /accounts/{id}": anyOperator,

	"POST /accounts":                        operatorOnly,
	"POST /accounts/{id}/topup":             operatorOnly,
	"POST /accounts/{id}/suspend":           operatorOnly,
	"POST /accounts/{id}/resume":            operatorOnly,
	"POST /accounts/{id}/limits":            operatorOnly,
	"POST /accounts/{id}/keys":              operatorOnly,
	"POST /accounts/{id}/keys/{key}/rotate": operatorOnly,
	"POST /accounts/{id}/keys/{key}/revoke": operatorOnly,
	"POST /accounts/{id}/keys/{key}/limits": operatorOnly,
}

// customerRoutes is every route of the customer console and its data API.
// A caller with an API key or read-only token reads the data API as
// before; the roles apply to a single sign-on session.
var customerRoutes = map[string]access{
	"/console":               public, // redirects to /console/
	CustomerPath:             public, // the page; its script reads the data API
	CustomerPath + "static/": public,
	"/v1/usage/":             public, // the data API's not-found reply

	"GET " + PathSSOLogin:    public,
	"GET " + PathSSOCallback: public,
	"POST " + PathSSOLogout:  anyCustomer,
	"GET " + PathMe:          public, // says whether signed in

	"/v1/usage":   anyCustomer,
	PathDaily:     anyCustomer,
	PathLedger:    anyCustomer,
	PathLedgerCSV: spendExporters,

	"GET " + PathKeysPage:  keyReaders,
	"POST " + PathKeysPage: keyMakers,
	"POST " + PathKeysAPI:  keyMakers,
	// A member revokes only the keys they made (Customer.revokeKey).
	"POST " + PathRevokeKey: keyMakers,
	"POST " + PathLimits:    accountAdmins,
	"GET " + PathAuditAPI:   accountAdmins,
}

// Mux is where routes are registered: an *http.ServeMux, or routeMux.
type Mux interface {
	Handle(pattern string, h http.Handler)
	HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request))
}

// routeMux is a ServeMux that remembers its patterns, so that a test can
// hold them against the table.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

// allowed reports whether id may use the route of table named by pattern.
func allowed(table map[string]access, pattern string, id *Identity) bool {
	a, ok := table[pattern]
	switch {
	case !ok:
		return false
	case a.public:
		return true
	case id == nil:
		return false
	}
	return a.roles.Allows(id.Roles)
}
