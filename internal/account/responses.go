package account

// Binding says that Account created the stored responses and items IDs,
// through the vendor key named Key ("" when unknown): a later request
// naming one of them by id is forwarded for that account only
// (internal/store/owners.go).
type Binding struct {
	Account string
	Key     string
	IDs     []string
}
