// Command app is a proxyless gRPC workload for the end-to-end tests. It
// reads its xDS bootstrap from GRPC_XDS_BOOTSTRAP.
//
//	app -serve 127.0.0.1:9000 -name echo-1   serve echo over xDS credentials
//	    [-unavailable-every n]                failing every n-th call with UNAVAILABLE
//	app -target xds:///host:port              call Who for every "call" line of stdin,
//	                                          on a new connection for every "dial" line
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/bulwark-mesh/bulwark/test/xds/echo"
)

func main() {
	serve := flag.String("serve", "", "address to serve on")
	name := flag.String("name", "echo", "server name to report")
	target := flag.String("target", "", "target to call")
	failEvery := flag.Int("unavailable-every", 0, "fail every n-th call with UNAVAILABLE (0: none)")
	flag.Parse()
	var err error
	if *serve != "" {
		err = runServer(*serve, *name, *failEvery)
	} else {
		err = runClient(*target)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func runServer(addr, name string, failEvery int) error {
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	s, err := xds.NewGRPCServer(grpc.Creds(creds), xds.ServingModeCallback(func(a net.Addr, args xds.ServingModeChangeArgs) {
		fmt.Printf("mode %s %v\n", args.Mode, args.Err)
	}))
	if err != nil {
		return err
	}
	echo.RegisterFailing(s, name, failEvery)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(lis)
}

func runClient(target string) error {
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		server, caller, err := call(conn, target, creds, in.Text() == "dial")
		if err != nil {
			st := status.Convert(err)
			fmt.Printf("err %s %q\n", st.Code(), st.Message())
			continue
		}
		fmt.Printf("ok %s %s\n", server, caller)
	}
	return in.Err()
}

// call makes one call on conn or, fresh, on a new connection to target,
// which makes a TLS handshake with the certificates in force.
func call(conn *grpc.ClientConn, target string, creds credentials.TransportCredentials, fresh bool) (server, caller string, err error) {
	if fresh {
		if conn, err = grpc.NewClient(target, grpc.WithTransportCredentials(creds)); err != nil {
			return "", "", err
		}
		defer conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return echo.Call(ctx, conn)
}
