// Command otgexample drives an OTG server (such as `testbed otg serve`) with gosnappi:
// one UDP flow of 1,000 frames of 128 bytes at 1,000 frames/s from the first port to the
// second, flow metrics on and a capture on the receiving port. It prints the flow metrics
// and exits 0 when the flow sent and received exactly 1,000 frames, 1 when it did not, and
// 2 when the server cannot be reached or refuses a request.
//
//	go run . -host https://127.0.0.1:8443 -ports p1,p2 [-pcap rx.pcap]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/open-traffic-generator/snappi/gosnappi"
)

const (
	frames    = 1000
	frameRate = 1000
	frameSize = 128
	flowName  = "udp-b2b"
)

// fail prints one line on stderr and leaves with the given status.
func fail(status int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "otgexample: "+format+"\n", args...)
	os.Exit(status)
}

// describe turns a gosnappi error into one line: the server's error list when it sent one.
func describe(err error) string {
	var otgErr gosnappi.Error
	if errors.As(err, &otgErr) {
		return fmt.Sprintf("server said %d: %s", otgErr.Code(), strings.Join(otgErr.Errors(), "; "))
	}
	return err.Error()
}

func buildConfig(txLocation, rxLocation string) gosnappi.Config {
	config := gosnappi.NewConfig()
	config.Ports().Add().SetName("tx").SetLocation(txLocation)
	config.Ports().Add().SetName("rx").SetLocation(rxLocation)
	config.Captures().Add().SetName("rx-capture").
		SetPortNames([]string{"rx"}).SetFormat(gosnappi.CaptureFormat.PCAP)

	flow := config.Flows().Add().SetName(flowName)
	flow.TxRx().Port().SetTxName("tx").SetRxNames([]string{"rx"})
	flow.Duration().FixedPackets().SetPackets(frames)
	flow.Rate().SetPps(frameRate)
	flow.Size().SetFixed(frameSize)
	flow.Metrics().SetEnable(true)

	// Documentation addresses only (RFC 2544's 198.18.0.0/15, locally administered MACs).
	eth := flow.Packet().Add().Ethernet()
	eth.Src().SetValue("02:00:00:00:01:01")
	eth.Dst().SetValue("02:00:00:00:01:02")
	ip := flow.Packet().Add().Ipv4()
	ip.Src().SetValue("198.18.0.1")
	ip.Dst().SetValue("198.18.0.2")
	udp := flow.Packet().Add().Udp()
	udp.SrcPort().SetValue(5000)
	udp.DstPort().SetValue(6000)
	return config
}

func setState(api gosnappi.Api, state gosnappi.ControlState, what string) {
	warnings, err := api.SetControlState(state)
	if err != nil {
		fail(2, "%s: %s", what, describe(err))
	}
	for _, w := range warnings.Warnings() {
		fmt.Fprintf(os.Stderr, "otgexample: warning: %s\n", w)
	}
}

func flowMetric(api gosnappi.Api) gosnappi.FlowMetric {
	request := gosnappi.NewMetricsRequest()
	request.Flow().SetFlowNames([]string{flowName})
	response, err := api.GetMetrics(request)
	if err != nil {
		fail(2, "get metrics: %s", describe(err))
	}
	for _, m := range response.FlowMetrics().Items() {
		if m.Name() == flowName {
			return m
		}
	}
	fail(2, "get metrics: the server's answer has no metrics for flow %q", flowName)
	return nil
}

func main() {
	host := flag.String("host", "https://127.0.0.1:8443", "the OTG server's address")
	ports := flag.String("ports", "p1,p2", "the two port locations, tx first, comma-separated")
	pcapPath := flag.String("pcap", "", "write the receiving port's capture to this file")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for the flow to stop")
	flag.Parse()
	if flag.NArg() != 0 {
		fail(2, "unexpected argument %q (flags: -host, -ports, -pcap, -timeout)", flag.Arg(0))
	}
	locations := strings.Split(*ports, ",")
	if len(locations) != 2 || locations[0] == "" || locations[1] == "" {
		fail(2, "-ports %q: give two port locations separated by a comma, such as p1,p2", *ports)
	}

	api := gosnappi.NewApi()
	api.NewHttpTransport().SetLocation(*host).SetVerify(false)
	if err := api.CheckVersionCompatibility(); err != nil {
		fail(2, "cannot use the server at %s: %s", *host, describe(err))
	}

	config := buildConfig(locations[0], locations[1])
	warnings, err := api.SetConfig(config)
	if err != nil {
		fail(2, "set config: %s", describe(err))
	}
	for _, w := range warnings.Warnings() {
		fmt.Fprintf(os.Stderr, "otgexample: warning: %s\n", w)
	}

	capture := gosnappi.NewControlState()
	capture.Port().Capture().SetState(gosnappi.StatePortCaptureState.START)
	setState(api, capture, "start capture")
	transmit := gosnappi.NewControlState()
	transmit.Traffic().FlowTransmit().SetState(gosnappi.StateTrafficFlowTransmitState.START)
	setState(api, transmit, "start transmit")

	deadline := time.Now().Add(*timeout)
	metric := flowMetric(api)
	for metric.Transmit() != gosnappi.FlowMetricTransmit.STOPPED ||
		metric.FramesRx() < metric.FramesTx() {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
		metric = flowMetric(api)
	}

	stopCapture := gosnappi.NewControlState()
	stopCapture.Port().Capture().SetState(gosnappi.StatePortCaptureState.STOP)
	setState(api, stopCapture, "stop capture")
	request := gosnappi.NewCaptureRequest().SetPortName("rx")
	pcap, err := api.GetCapture(request)
	if err != nil {
		fail(2, "get capture: %s", describe(err))
	}
	if *pcapPath != "" {
		if err := os.WriteFile(*pcapPath, pcap, 0o644); err != nil {
			fail(2, "cannot write %s: %v", *pcapPath, err)
		}
	}

	fmt.Printf("%-10s %-8s %10s %10s %12s %12s\n",
		"flow", "state", "frames_tx", "frames_rx", "bytes_tx", "bytes_rx")
	fmt.Printf("%-10s %-8s %10d %10d %12d %12d\n", metric.Name(), metric.Transmit(),
		metric.FramesTx(), metric.FramesRx(), metric.BytesTx(), metric.BytesRx())
	fmt.Printf("capture of port rx: %d bytes\n", len(pcap))
	if metric.FramesTx() != frames || metric.FramesRx() != frames {
		fmt.Fprintf(os.Stderr, "otgexample: expected %d frames sent and received, got %d and %d\n",
			frames, metric.FramesTx(), metric.FramesRx())
		os.Exit(1)
	}
}
