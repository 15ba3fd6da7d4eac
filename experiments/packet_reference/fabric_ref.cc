// Packet-level reference scenarios for fabric_jax (ns-3 3.44, built by build.sh).
//
// One program, three scenarios, every figure printed as "key value" lines that
// experiments/packet_side_by_side.py reads back:
//
//   --scenario=incast     N senders -> 1 receiver through one switch; TCP DCTCP with
//                         step ECN marking at K packets on the switch ports (RED with
//                         MinTh = MaxTh = K, QW = 1); finite flows.  Prints each flow's
//                         completion time and the bottleneck queue's p50 / p99 / max
//                         (sampled every --sampleNs).
//   --scenario=leafspine  2 leaves x H hosts, S spines; permutation (host i of leaf 0
//                         <-> host i of leaf 1).  --routing=spray: per-packet random
//                         choice among the equal-cost next hops (Ipv4GlobalRouting
//                         RandomEcmpRouting); --routing=ecmp: each flow pinned to one
//                         spine drawn at random (host routes on the leaves, a per-flow
//                         hash).  --transport=udp: constant-rate UdpClient streams at
//                         --load x line rate (deterministic spacing), the receiver counts
//                         packets that arrive after a later one (out of order) and the
//                         leaf-uplink queue; --transport=tcp: DCTCP bulk flows, goodput
//                         with fast retransmit after --dupThresh duplicate ACKs (3: a
//                         receiver/sender pair that treats reordering as loss; large: one
//                         that tolerates it).
//   --scenario=ring       one step of a ring all-reduce over 2 leaves x H hosts: host k
//                         sends --flowBytes to host k+1 (mod 2H); DCTCP; per-flow
//                         completion.
//
// Every link: --linkGbps, --latencyUs (one-way propagation), device MTU 9000 (4096-byte
// TCP segments / UDP datagrams of 4096 bytes on the wire, the RoCE MTU of the fluid model).
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

using namespace ns3;

namespace {

struct FlowStat {
  uint64_t bytes = 0, packets = 0, ooo = 0, target = 0;
  int64_t maxSeq = -1;
  double first = -1, done = -1, start = -1;
};
std::vector<FlowStat> g_flows;
std::vector<double> g_qsamples;
Ptr<QueueDisc> g_qdisc;
Ptr<NetDevice> g_qdev;
double g_sampleNs = 100;
double g_stopS = 1;

void SampleQueue() {
  uint32_t b = g_qdisc ? g_qdisc->GetNBytes() : 0;
  auto p2p = DynamicCast<PointToPointNetDevice>(g_qdev);
  if (p2p) b += p2p->GetQueue()->GetNBytes();
  g_qsamples.push_back(b);
  if (Simulator::Now().GetSeconds() < g_stopS)
    Simulator::Schedule(NanoSeconds(g_sampleNs), &SampleQueue);
}

void UdpRecv(uint32_t f, Ptr<Socket> s) {
  Ptr<Packet> p;
  while ((p = s->Recv())) {
    FlowStat &st = g_flows[f];
    uint32_t size = p->GetSize();
    SeqTsHeader h;
    p->RemoveHeader(h);
    int64_t seq = h.GetSeq();
    if (seq < st.maxSeq) st.ooo++;
    st.maxSeq = std::max(st.maxSeq, seq);
    st.packets++;
    st.bytes += size;
    if (st.first < 0) st.first = Simulator::Now().GetSeconds();
  }
}

void SinkRx(uint32_t f, Ptr<const Packet> p, const Address &) {
  FlowStat &st = g_flows[f];
  if (st.first < 0) st.first = Simulator::Now().GetSeconds();
  st.bytes += p->GetSize();
  if (st.done < 0 && st.target > 0 && st.bytes >= st.target)
    st.done = Simulator::Now().GetSeconds();
}

// the first data byte handed to TCP (after the handshake): the flow's start, as in the
// fluid model, which has no connection set-up
void AppTx(uint32_t f, Ptr<const Packet>) {
  if (g_flows[f].start < 0) g_flows[f].start = Simulator::Now().GetSeconds();
}

Ipv4Address HostAddr(Ptr<Node> h) { return h->GetObject<Ipv4>()->GetAddress(1, 0).GetLocal(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char *argv[]) {
  std::string scenario = "incast", routing = "spray", transport = "udp";
  double linkGbps = 100, latencyUs = 1, load = 0.5, durationUs = 2000, warmupUs = 200;
  uint32_t nSenders = 16, spines = 4, hostsPerLeaf = 4, kPackets = 0, dupThresh = 3;
  uint64_t flowBytes = 1000000, seed = 1;
  CommandLine cmd;
  cmd.AddValue("scenario", "incast | leafspine | ring", scenario);
  cmd.AddValue("routing", "spray | ecmp (leafspine)", routing);
  cmd.AddValue("transport", "udp | tcp (leafspine)", transport);
  cmd.AddValue("linkGbps", "every link, Gb/s", linkGbps);
  cmd.AddValue("latencyUs", "one-way propagation per link, us", latencyUs);
  cmd.AddValue("load", "UDP rate per flow, fraction of line rate", load);
  cmd.AddValue("durationUs", "simulated time (udp / tcp leafspine), us", durationUs);
  cmd.AddValue("warmupUs", "UDP: packets sent before this are not counted", warmupUs);
  cmd.AddValue("senders", "incast degree", nSenders);
  cmd.AddValue("spines", "spines (leafspine)", spines);
  cmd.AddValue("hostsPerLeaf", "hosts per leaf (leafspine, ring)", hostsPerLeaf);
  cmd.AddValue("kPackets", "ECN threshold K, packets (0: C T / 7)", kPackets);
  cmd.AddValue("dupThresh", "TCP duplicate-ACK threshold", dupThresh);
  cmd.AddValue("flowBytes", "bytes per flow (incast, ring, tcp)", flowBytes);
  cmd.AddValue("sampleNs", "queue sampling period, ns", g_sampleNs);
  cmd.AddValue("seed", "RNG run number", seed);
  cmd.Parse(argc, argv);
  RngSeedManager::SetSeed(1);
  RngSeedManager::SetRun(seed);

  const uint32_t seg = 4096;
  const double rateBps = linkGbps * 1e9;
  const uint32_t nHops = scenario == "incast" ? 2 : 4;
  // round trip with one store-and-forward packet time per hop, as HPCC's third.cc
  // computes it (delay x 2 + txDelay); the initial window and K use it
  const double baseRtt = 2 * nHops * latencyUs * 1e-6 + nHops * seg * 8.0 / rateBps;
  const double bdp = rateBps / 8 * baseRtt;
  if (kPackets == 0) kPackets = std::max<uint32_t>(1, uint32_t(bdp / 7 / seg + 0.5));

  Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue("ns3::TcpDctcp"));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(seg));
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
  uint32_t iw = std::max<uint32_t>(2, uint32_t(bdp / seg + 0.5));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(iw));
  Config::SetDefault("ns3::TcpSocket::InitialSlowStartThreshold", UintegerValue(iw * seg));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1 << 26));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1 << 26));
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MicroSeconds(200)));
  Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
  Config::SetDefault("ns3::TcpSocketBase::ReTxThreshold", UintegerValue(dupThresh));
  Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
  // SACK off: ns-3 3.44 crashes in TcpTxBuffer::Update on SACK blocks under heavy
  // reordering (spraying with TCP); recovery is then NewReno-style
  Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(false));
  Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
  Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));
  Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
  Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(seg + 52));
  Config::SetDefault("ns3::RedQueueDisc::MinTh", DoubleValue(kPackets));
  Config::SetDefault("ns3::RedQueueDisc::MaxTh", DoubleValue(kPackets));
  Config::SetDefault("ns3::RedQueueDisc::MaxSize", QueueSizeValue(QueueSize("50000p")));
  Config::SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting",
                     BooleanValue(routing == "spray"));

  PointToPointHelper p2p;
  p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(rateBps))));
  p2p.SetDeviceAttribute("Mtu", UintegerValue(9000));
  p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(uint64_t(latencyUs * 1000))));
  p2p.SetQueue("ns3::DropTailQueue", "MaxSize", QueueSizeValue(QueueSize("2p")));
  TrafficControlHelper red;
  red.SetRootQueueDisc("ns3::RedQueueDisc", "LinkBandwidth",
                       DataRateValue(DataRate(uint64_t(rateBps))), "LinkDelay",
                       TimeValue(NanoSeconds(uint64_t(latencyUs * 1000))));
  InternetStackHelper stack;
  Ipv4AddressHelper addr;
  addr.SetBase("10.0.0.0", "255.255.255.252");

  NodeContainer hosts, switches;
  // (a, b, device on a, device on b) of every link; a switch-side egress gets RED
  struct Link { Ptr<Node> a, b; Ptr<NetDevice> da, db; };
  std::vector<Link> links;
  auto connect = [&](Ptr<Node> a, Ptr<Node> b, bool aSwitch, bool bSwitch) {
    NetDeviceContainer d = p2p.Install(a, b);
    if (aSwitch) red.Install(d.Get(0));
    if (bSwitch) red.Install(d.Get(1));
    addr.Assign(d);
    addr.NewNetwork();
    links.push_back({a, b, d.Get(0), d.Get(1)});
    return d;
  };
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // (src host, dst host) per flow
  std::vector<std::vector<Ptr<NetDevice>>> uplink;  // [leaf][spine] device on the leaf
  Ptr<NetDevice> bottleneck;

  if (scenario == "incast") {
    hosts.Create(nSenders + 1);
    switches.Create(1);
    stack.Install(hosts);
    stack.Install(switches);
    for (uint32_t h = 0; h <= nSenders; h++) {
      NetDeviceContainer d = connect(hosts.Get(h), switches.Get(0), false, true);
      if (h == nSenders) bottleneck = d.Get(1);
    }
    for (uint32_t h = 0; h < nSenders; h++) pairs.push_back({h, nSenders});
  } else {
    uint32_t H = hostsPerLeaf;
    hosts.Create(2 * H);
    switches.Create(2 + spines);  // 0, 1 leaves; 2.. spines
    stack.Install(hosts);
    stack.Install(switches);
    for (uint32_t l = 0; l < 2; l++)
      for (uint32_t i = 0; i < H; i++)
        connect(hosts.Get(l * H + i), switches.Get(l), false, true);
    uplink.assign(2, {});
    for (uint32_t l = 0; l < 2; l++)
      for (uint32_t s = 0; s < spines; s++) {
        NetDeviceContainer d = connect(switches.Get(l), switches.Get(2 + s), true, true);
        uplink[l].push_back(d.Get(0));
      }
    bottleneck = uplink[0][0];
    if (scenario == "leafspine") {
      for (uint32_t i = 0; i < H; i++) pairs.push_back({i, H + i});
      for (uint32_t i = 0; i < H; i++) pairs.push_back({H + i, i});
    } else {  // ring over 2H hosts
      for (uint32_t k = 0; k < 2 * H; k++) pairs.push_back({k, (k + 1) % (2 * H)});
    }
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();
  if (scenario != "incast" && routing == "ecmp") {
    // per-flow ECMP: each destination host (one flow each) pinned to a random spine on
    // its source leaf (a static host route outranks the global routes)
    Ptr<UniformRandomVariable> u = CreateObject<UniformRandomVariable>();
    Ipv4StaticRoutingHelper sh;
    uint32_t H = hostsPerLeaf;
    for (auto [src, dst] : pairs) {
      uint32_t leaf = src / H, dleaf = dst / H;
      if (leaf == dleaf) continue;
      uint32_t s = u->GetInteger(0, spines - 1);
      printf("ecmp_spine %u %u %u\n", src, dst, s);
      Ptr<NetDevice> dev = uplink[leaf][s];
      Ptr<Ipv4> ip = dev->GetNode()->GetObject<Ipv4>();
      int32_t iface = ip->GetInterfaceForDevice(dev);
      Ptr<Channel> ch = dev->GetChannel();
      Ptr<NetDevice> peer = ch->GetDevice(0) == dev ? ch->GetDevice(1) : ch->GetDevice(0);
      Ptr<Ipv4> pip = peer->GetNode()->GetObject<Ipv4>();
      Ipv4Address nh = pip->GetAddress(pip->GetInterfaceForDevice(peer), 0).GetLocal();
      sh.GetStaticRouting(ip)->AddHostRouteTo(HostAddr(hosts.Get(dst)), nh, iface);
    }
  }
  g_qdev = bottleneck;
  g_qdisc = bottleneck->GetNode()->GetObject<TrafficControlLayer>()->GetRootQueueDiscOnDevice(
      bottleneck);

  g_flows.assign(pairs.size(), FlowStat());
  double stopS;
  bool udp = scenario == "leafspine" && transport == "udp";
  for (uint32_t f = 0; f < pairs.size(); f++) {
    auto [src, dst] = pairs[f];
    uint16_t port = 10000 + f;
    if (udp) {
      Ptr<Socket> s = Socket::CreateSocket(hosts.Get(dst), UdpSocketFactory::GetTypeId());
      s->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
      s->SetRecvCallback(MakeBoundCallback(&UdpRecv, f));
      UdpClientHelper c(HostAddr(hosts.Get(dst)), port);
      uint32_t payload = seg - 28;  // 4096 bytes on the wire with UDP/IP headers
      c.SetAttribute("PacketSize", UintegerValue(payload));
      c.SetAttribute("MaxPackets", UintegerValue(0));
      c.SetAttribute("Interval", TimeValue(Seconds(seg * 8.0 / (load * rateBps))));
      ApplicationContainer a = c.Install(hosts.Get(src));
      // staggered starts inside one packet time: the streams are not phase-locked
      Ptr<UniformRandomVariable> u = CreateObject<UniformRandomVariable>();
      a.Start(Seconds(u->GetValue(0, seg * 8.0 / rateBps)));
      a.Stop(MicroSeconds(durationUs));
    } else {
      PacketSinkHelper sink("ns3::TcpSocketFactory",
                            InetSocketAddress(Ipv4Address::GetAny(), port));
      ApplicationContainer sa = sink.Install(hosts.Get(dst));
      sa.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&SinkRx, f));
      BulkSendHelper bs("ns3::TcpSocketFactory", InetSocketAddress(HostAddr(hosts.Get(dst)), port));
      bs.SetAttribute("MaxBytes", UintegerValue(flowBytes));
      bs.SetAttribute("SendSize", UintegerValue(seg));
      ApplicationContainer ba = bs.Install(hosts.Get(src));
      ba.Start(Seconds(0));
      ba.Get(0)->TraceConnectWithoutContext("Tx", MakeBoundCallback(&AppTx, f));
      g_flows[f].target = flowBytes;
    }
  }
  stopS = (scenario == "leafspine" ? durationUs : std::max(durationUs, 20000.0)) * 1e-6;
  g_stopS = stopS;
  Simulator::Schedule(NanoSeconds(g_sampleNs), &SampleQueue);
  if (udp) {  // count only packets received after the warm-up
    Simulator::Schedule(MicroSeconds(warmupUs), [] {
      for (auto &st : g_flows) { st.bytes = st.packets = st.ooo = 0; }
    });
  }
  Simulator::Stop(Seconds(stopS + 1e-3));
  Simulator::Run();

  printf("scenario %s\nrouting %s\ntransport %s\nlink_gbps %g\nlatency_us %g\n",
         scenario.c_str(), routing.c_str(), transport.c_str(), linkGbps, latencyUs);
  printf("base_rtt_us %g\nk_packets %u\ninitial_cwnd_packets %u\n", baseRtt * 1e6, kPackets, iw);
  for (uint32_t f = 0; f < g_flows.size(); f++) {
    const FlowStat &s = g_flows[f];
    printf("flow %u src %u dst %u bytes %llu packets %llu ooo %llu first_us %.4f done_us %.4f "
           "start_us %.4f\n", f,
           pairs[f].first, pairs[f].second, (unsigned long long)s.bytes,
           (unsigned long long)s.packets, (unsigned long long)s.ooo, s.first * 1e6,
           s.done * 1e6, s.start * 1e6);
  }
  // queue samples while the fabric is busy (up to the last completion for finite flows)
  double last = 0;
  for (auto &s : g_flows) last = std::max(last, s.done);
  size_t n = g_qsamples.size();
  if (!udp && last > 0) n = std::min(n, size_t(last * 1e9 / g_sampleNs));
  double t0 = 1e9;
  for (auto &s : g_flows) if (s.start >= 0) t0 = std::min(t0, s.start);
  size_t skip = udp ? size_t(warmupUs * 1e3 / g_sampleNs) : (t0 < 1e9 ? size_t(t0 * 1e9 / g_sampleNs) : 0);
  std::vector<double> q(g_qsamples.begin() + std::min(skip, n), g_qsamples.begin() + n);
  double mean = 0;
  for (double v : q) mean += v;
  mean = q.empty() ? 0 : mean / q.size();
  printf("queue_samples %zu\nqueue_mean_bytes %.1f\nqueue_p50_bytes %.1f\nqueue_p99_bytes %.1f\n"
         "queue_max_bytes %.1f\n", q.size(), mean, Quantile(q, 0.5), Quantile(q, 0.99),
         Quantile(q, 1.0));
  Simulator::Destroy();
  return 0;
}
