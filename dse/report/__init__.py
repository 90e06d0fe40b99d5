"""Dashboards: pure ``*_info()`` data functions, thin plotly renderers, one offline HTML page."""

from dse.report.dashboard import DashboardInfo, dashboard_html, dashboard_info, write_dashboard
from dse.report.distributions import LATENCY_KEY
from dse.report.failures import FailureGroup, FailuresInfo, failures_info
from dse.report.front_table import front_table_info
from dse.report.index import write_index
from dse.report.info import (
    AxisInfo,
    ParetoScatterInfo,
    PointGroup,
    axis_title,
    hover_texts,
    pareto_scatter_info,
)
from dse.report.parallel import Dimension, ParallelCoordinatesInfo, parallel_coordinates_info
from dse.report.profile_page import profile_page_name, write_profile_page
from dse.report.serve import DashboardServer, LiveCampaign
from dse.report.summary import SummaryInfo, status_counts, summary_info
from dse.report.table_info import TableInfo

__all__ = [
    "LATENCY_KEY",
    "AxisInfo",
    "DashboardInfo",
    "DashboardServer",
    "Dimension",
    "FailureGroup",
    "FailuresInfo",
    "LiveCampaign",
    "ParallelCoordinatesInfo",
    "ParetoScatterInfo",
    "PointGroup",
    "SummaryInfo",
    "TableInfo",
    "axis_title",
    "dashboard_html",
    "dashboard_info",
    "failures_info",
    "front_table_info",
    "hover_texts",
    "parallel_coordinates_info",
    "pareto_scatter_info",
    "profile_page_name",
    "status_counts",
    "summary_info",
    "write_dashboard",
    "write_index",
    "write_profile_page",
]
