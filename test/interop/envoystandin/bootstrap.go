package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// bootInfo is what the stand-in takes from the bootstrap pilot-agent wrote.
type bootInfo struct {
	node      *corev3.Node
	adsType   string // ads_config.api_type
	xdsPath   string // the pipe of the ADS cluster (xds-grpc)
	adminAddr string // host:port
	// pipes are the static clusters reached over a UDS, by name: the
	// clusters an SDS config may name (sds-grpc).
	pipes map[string]string
	// staticClusters and staticListeners are the bootstrap's own, which
	// xDS may neither replace nor collide with.
	staticClusters  map[string]bool
	staticListeners map[string]string // name → bound address
	staticSecrets   map[string]bool
}

// readBootstrap parses the bootstrap JSON as Envoy would (unknown fields
// are allowed: pilot-agent passes --allow-unknown-static-fields) and
// finds the node, the ADS cluster's socket and the admin address.
func readBootstrap(path string) (*bootInfo, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bootstrap: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("parse bootstrap %s: %w", path, err)
	}
	if err := validateTree(&b); err != nil {
		return nil, fmt.Errorf("bootstrap %s: %w", path, err)
	}
	// Envoy adds who it is and what it supports to the bootstrap's node.
	node := proto.Clone(b.GetNode()).(*corev3.Node)
	node.UserAgentName = "envoy"
	node.ClientFeatures = append(node.ClientFeatures,
		"envoy.lb.does_not_support_overprovisioning", "envoy.lrs.supports_send_all_clusters")
	info := &bootInfo{
		node:            node,
		pipes:           map[string]string{},
		staticClusters:  map[string]bool{},
		staticListeners: map[string]string{},
		staticSecrets:   map[string]bool{},
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		info.staticClusters[c.GetName()] = true
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				if p := ep.GetEndpoint().GetAddress().GetPipe().GetPath(); p != "" {
					info.pipes[c.GetName()] = p
				}
			}
		}
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		info.staticListeners[l.GetName()] = boundAddress(l.GetAddress())
	}
	for _, s := range b.GetStaticResources().GetSecrets() {
		info.staticSecrets[s.GetName()] = true
	}
	ads := b.GetDynamicResources().GetAdsConfig()
	info.adsType = ads.GetApiType().String()
	if ads.GetApiType() != corev3.ApiConfigSource_DELTA_GRPC {
		return nil, fmt.Errorf("bootstrap asks for ADS of type %s; the stand-in speaks DELTA_GRPC only", info.adsType)
	}
	if len(ads.GetGrpcServices()) != 1 || ads.GetGrpcServices()[0].GetEnvoyGrpc() == nil {
		return nil, fmt.Errorf("bootstrap ads_config: want one envoy_grpc service, got %v", ads.GetGrpcServices())
	}
	adsCluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	if info.xdsPath = info.pipes[adsCluster]; info.xdsPath == "" {
		return nil, fmt.Errorf("bootstrap: ADS cluster %q is not a static cluster on a pipe", adsCluster)
	}
	for what, cs := range map[string]*corev3.ConfigSource{
		"cds_config": b.GetDynamicResources().GetCdsConfig(), "lds_config": b.GetDynamicResources().GetLdsConfig(),
	} {
		if cs.GetAds() == nil {
			return nil, fmt.Errorf("bootstrap %s is not ADS", what)
		}
	}
	sa := b.GetAdmin().GetAddress().GetSocketAddress()
	if sa == nil {
		return nil, fmt.Errorf("bootstrap: no admin socket address")
	}
	info.adminAddr = net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
	return info, nil
}

// boundAddress is the address a listener binds, as "ip:port/protocol".
func boundAddress(a *corev3.Address) string {
	sa := a.GetSocketAddress()
	if sa == nil {
		return a.String()
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)) + "/" + sa.GetProtocol().String()
}
