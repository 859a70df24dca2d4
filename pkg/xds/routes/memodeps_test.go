package routes

import (
	"bytes"
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestMemoWireRoutesFollowADestinationRuleOfAHostRoutedToTwice: the
// DestinationRule read for a host that several routes of a VirtualService
// go to, held once, still decides whether the next snapshot may reuse the
// translation: a rule asking a consistent hash for that host, added in
// the next snapshot, gives the routes its hash policy, as translating
// them anew does.
func TestMemoWireRoutesFollowADestinationRuleOfAHostRoutedToTwice(t *testing.T) {
	spec := &networkingv1.VirtualService{Hosts: []string{"a.example.com"}, Http: []*networkingv1.HTTPRoute{
		{Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{"x": {MatchType: &networkingv1.StringMatch_Exact{Exact: "1"}}}}}, Route: to("hashed")},
		{Route: to("hashed"), Mirror: &networkingv1.Destination{Host: "hashed"}},
	}}
	vs := vsOf("a", "default", spec)
	with := wireSnapshot(gateway(httpServer("*")), vs)
	res := *with.Resources()
	res.DestinationRules = nil
	without := model.Build("0", with.Options, res)
	scope := Scope{Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: "default"}}

	var m Memo
	before, err := Options{}.MemoWireRoutes(&m, without, vs, scope)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Options{}.MemoWireRoutes(&m, with, vs, scope)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Options{}.MemoWireRoutes(nil, with, vs, scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(fresh) {
		t.Fatalf("%d routes through the memo, %d translated anew", len(after), len(fresh))
	}
	for i := range fresh {
		if !bytes.Equal(after[i], fresh[i]) {
			t.Errorf("route %d through the memo differs from its translation anew", i)
		}
	}
	if bytes.Equal(before[0], after[0]) {
		t.Error("the rule's consistent hash left the first route as it was")
	}
}
