"""The OTG API over gRPC (`testbed otg serve --grpc HOST:PORT`), on the same `OtgService`.

The messages and the service description are snappi's own generated ones (`snappi.otg_pb2`,
`otg_pb2_grpc`): a request is turned into the OpenAPI JSON (the two share field names), handed to
the service exactly as the HTTP server hands it, and the answer parsed back into the response
message. A refusal aborts the call with the OTG Error JSON as its details, which is how snappi's
and gosnappi's gRPC clients decode errors. Plain gRPC on loopback (no TLS), as ixia-c serves it.
"""

from __future__ import annotations

import json
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import json_format
from snappi import otg_pb2, otg_pb2_grpc

from .refusal import OtgRefusal
from .server import MainLoop
from .service import OtgService, version

_GRPC_CODE = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.FAILED_PRECONDITION,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
}


def _dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


class _Servicer(otg_pb2_grpc.OpenapiServicer):
    def __init__(self, service: OtgService, loop: MainLoop) -> None:
        self.service = service
        self.loop = loop

    def _call(self, context: grpc.ServicerContext, fn: Any, *args: Any) -> Any:
        try:
            return self.loop.call(fn, *args)
        except OtgRefusal as refusal:
            context.abort(
                _GRPC_CODE.get(refusal.code, grpc.StatusCode.UNKNOWN), json.dumps(refusal.body())
            )
        except Exception as exc:  # the server's own fault, said as OTG's internal error
            body = OtgRefusal(500, "internal", [f"{type(exc).__name__}: {exc}"]).body()
            context.abort(grpc.StatusCode.INTERNAL, json.dumps(body))

    def SetConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        text = json.dumps(_dict(request.config))
        w = self._call(context, self.service.set_config, text)
        return otg_pb2.SetConfigResponse(warning=json_format.ParseDict(w, otg_pb2.Warning()))

    def GetConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        c = self._call(context, self.service.get_config)
        return otg_pb2.GetConfigResponse(config=json_format.ParseDict(c, otg_pb2.Config()))

    def SetControlState(self, request: Any, context: grpc.ServicerContext) -> Any:
        w = self._call(context, self.service.set_control_state, _dict(request.control_state))
        return otg_pb2.SetControlStateResponse(warning=json_format.ParseDict(w, otg_pb2.Warning()))

    def GetMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        m = self._call(context, self.service.get_metrics, _dict(request.metrics_request))
        return otg_pb2.GetMetricsResponse(
            metrics_response=json_format.ParseDict(m, otg_pb2.MetricsResponse())
        )

    def GetCapture(self, request: Any, context: grpc.ServicerContext) -> Any:
        b = self._call(context, self.service.get_capture, _dict(request.capture_request))
        return otg_pb2.GetCaptureResponse(response_bytes=b)

    def GetVersion(self, request: Any, context: grpc.ServicerContext) -> Any:
        return otg_pb2.GetVersionResponse(
            version=json_format.ParseDict(version(), otg_pb2.Version())
        )


def grpc_server(
    service: OtgService, loop: MainLoop, host: str, port: int
) -> tuple[grpc.Server, int]:
    """A started gRPC server for `service` on host:port (0: any free port); (server, port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    otg_pb2_grpc.add_OpenapiServicer_to_server(_Servicer(service, loop), server)
    bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} for gRPC")
    server.start()
    return server, bound
