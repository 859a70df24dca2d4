package resource

import "testing"

func TestClusterNamesParse(t *testing.T) {
	for name, tc := range map[string]struct {
		in           string
		host, subset string
		port         uint32
	}{
		"an outbound cluster":            {in: "outbound|80|v1|echo.app.svc.cluster.local", host: "echo.app.svc.cluster.local", subset: "v1", port: 80},
		"an SNI-DNAT cluster":            {in: SNIClusterName("echo.app.svc.cluster.local", "", 15443), host: "echo.app.svc.cluster.local", port: 15443},
		"an SNI-DNAT cluster of subset":  {in: "outbound_.80_.v1_.echo.app.svc.cluster.local", host: "echo.app.svc.cluster.local", subset: "v1", port: 80},
		"an SNI name without host":       {in: "outbound_.80_.v1_."},
		"an SNI name with a bad port":    {in: "outbound_.x_._.echo"},
		"an SNI name of port 0":          {in: "outbound_.0_._.echo"},
		"an inbound cluster":             {in: "inbound|80||"},
		"a name of neither kind":         {in: "BlackHoleCluster"},
		"an SNI name of a host with _. ": {in: "outbound_.80_._.a_.b"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ClusterHost(tc.in); got != tc.host {
				t.Errorf("host %q, want %q", got, tc.host)
			}
			if tc.host == "" {
				return
			}
			h, s, p, ok := ParseClusterName(tc.in)
			if !ok {
				h, s, p, ok = ParseSNIClusterName(tc.in)
			}
			if !ok || h != tc.host || s != tc.subset || p != tc.port {
				t.Errorf("parsed %q %q %d %v", h, s, p, ok)
			}
		})
	}
}
