package authn

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
	"time"
)

// unverifiedExpiry reads the exp claim of a compact JWS without verifying
// it. It is used only for tokens the API server has already accepted, to
// stop caching a review past the token's own lifetime. ok is false when
// there is no usable exp.
func unverifiedExpiry(token string) (exp time.Time, ok bool) {
	if len(token) > MaxTokenSize {
		return time.Time{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	secs, err := claims.Exp.Float64()
	if err != nil || math.IsNaN(secs) || secs <= 0 || secs > math.MaxInt32*4 {
		return time.Time{}, false
	}
	return time.Unix(int64(secs), 0), true
}
